"""One test per rule of docs/spec.md sections 4 and 5, at the edges, on the embedded engine."""

from __future__ import annotations

from datetime import timedelta

import pytest

from checks.base import Status
from checks.evidence import Evidence, FailureRun
from tests.builder import T0, H, M, S, Scenario, evaluate
from watchdog.core.store import Store

# The spec's rules stay in the inner loop (make test-fast), store queries and all.
pytestmark = pytest.mark.inner_loop

AT = T0 + 4 * H  # the window is [T0, T0 + 4h)
MS = timedelta(milliseconds=1)


def check(report, check_id):  # type: ignore[no-untyped-def]
    return report.checks[check_id]


# --- recall_coverage -------------------------------------------------------


def test_recall_at_the_end_of_grace_counts(store: Store) -> None:
    """A recall exactly recall_grace after the first event meets the start obligation."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H + 5 * M)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_recall_just_after_grace_is_a_cold_start(store: Store) -> None:
    """A session whose recall lands after the grace period counts as a cold start."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H + 5 * M + MS)
    sc.session("s2").starts(T0 + H).recalls(T0 + H + M)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 2)
    assert result.evidence == Evidence(sessions=("s1",))
    assert result.summary == "1 of 2 sessions started without recall"


def test_session_without_any_recall_is_cold_not_no_data(store: Store) -> None:
    """Sessions without any recall event are cold starts, not no_data."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).emits("tool.call.completed", T0 + H + M)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_obligation_due_just_before_window_end_is_judged(store: Store) -> None:
    """A start obligation due 1 ms before `at` is judged in this window."""
    sc = Scenario()
    sc.session("s1").starts(AT - 5 * M - MS)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 1)


def test_obligation_due_at_window_end_is_judged_next_window(store: Store) -> None:
    """An obligation due exactly at `at` is not judged now, but in the next window."""
    sc = Scenario()
    sc.session("s1").starts(AT - 5 * M)
    now = check(evaluate(store, sc, AT), "recall_coverage")
    assert (now.status, now.value, now.sample_size) == (Status.NO_DATA, None, 0)
    later = check(evaluate(store, sc, AT + 4 * H), "recall_coverage")
    assert (later.status, later.value, later.sample_size) == (Status.BREACHED, 1, 1)


def test_session_still_in_grace_is_not_counted(store: Store) -> None:
    """A session that has not had its chance yet is never counted."""
    sc = Scenario()
    sc.session("s1").starts(AT - M)
    sc.session("s2").starts(T0 + H).recalls(T0 + H + S)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


# --- observe_coverage ------------------------------------------------------


def test_end_observe_within_five_minutes_before_end_counts(store: Store) -> None:
    """An observe up to 5 min before the end event meets the end obligation."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H).observes(T0 + 2 * H - 5 * M).ends(T0 + 2 * H)
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_end_observe_earlier_than_five_minutes_before_end_misses(store: Store) -> None:
    """An observe more than 5 min before the end does not meet the end obligation."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H).observes(T0 + 2 * H - 5 * M - 2 * S).ends(
        T0 + 2 * H
    )
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.status, result.value) == (Status.BREACHED, 1)
    assert result.evidence == Evidence(sessions=("s1",))


def test_end_observe_after_grace_misses(store: Store) -> None:
    """An observe later than observe_grace after the end is too late."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).ends(T0 + 2 * H).observes(T0 + 2 * H + 15 * M + S)
    sc.session("s2").starts(T0 + H).ends(T0 + 2 * H).observes(T0 + 2 * H + 15 * M)
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.value, result.sample_size, result.evidence) == (1, 2, Evidence(sessions=("s1",)))


def test_silent_end_exactly_at_idle_timeout_is_not_yet_due(store: Store) -> None:
    """A session idle for exactly idle_timeout at `at` is judged in the next window."""
    sc = Scenario()
    sc.session("s1").starts(AT - 7 * H).emits("tool.call.completed", AT - 6 * H)
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.status, result.sample_size) == (Status.NO_DATA, 0)
    later = check(evaluate(store, sc, AT + 4 * H), "observe_coverage")
    assert (later.status, later.value, later.sample_size) == (Status.BREACHED, 1, 1)


def test_silent_end_past_idle_timeout_without_observe_breaches(store: Store) -> None:
    """A crashed session (no end event, idle past idle_timeout) that never observed breaches."""
    sc = Scenario()
    sc.session("crashed").starts(AT - 8 * H).emits("tool.call.completed", AT - 6 * H - MS)
    sc.session("fine").starts(AT - 8 * H).observes(AT - 6 * H - 2 * M).emits(
        "tool.call.completed", AT - 6 * H - MS
    )
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.value, result.sample_size, result.evidence) == (
        1,
        2,
        Evidence(sessions=("crashed",)),
    )


def test_compaction_observe_within_window_counts(store: Store) -> None:
    """A compaction is observed by an observe in [ts - 1 min, ts + observe_grace]."""
    sc = Scenario()
    sc.session("early").starts(T0 + H).compacts(T0 + 2 * H).observes(T0 + 2 * H - M)
    sc.session("late").starts(T0 + H).compacts(T0 + 2 * H).observes(T0 + 2 * H + 15 * M + S)
    sc.session("never").starts(T0 + H).compacts(T0 + 2 * H)
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.value, result.sample_size) == (2, 3)
    assert result.evidence == Evidence(sessions=("late", "never"))


def test_duplicate_compaction_rows_count_one_session(store: Store) -> None:
    """Duplicated compaction rows make one obligation, one session."""
    sc = Scenario()
    b = sc.session("s1").starts(T0 + H)
    b.compacts(T0 + 2 * H)
    sc.duplicate(sc.events[-1])
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.value, result.sample_size) == (1, 1)


# --- failure rates and lost outcomes ---------------------------------------


def _observes(sc: Scenario, n: int, *, failed: int = 0, lost: int = 0) -> None:
    for i in range(n):
        sc.session(f"s{i}").starts(T0 + H + i * S).observes(
            T0 + H + i * S, fails=i < failed, lost=failed <= i < failed + lost
        )


def test_observe_failure_rate_counts_failed_and_lost(store: Store) -> None:
    """(failed + lost) / (completed + failed + lost): 1 failed and 1 lost of 20 is 10%."""
    sc = Scenario()
    _observes(sc, 20, failed=1, lost=1)
    result = check(evaluate(store, sc, AT), "observe_failure_rate")
    assert result.status is Status.BREACHED
    assert result.value == 2 / 20
    assert result.sample_size == 20
    assert result.evidence.failed == 1 and result.evidence.lost == 1
    assert len(result.evidence.events or ()) == 2


def test_outcome_within_grace_is_not_lost(store: Store) -> None:
    """A requested observe whose completion lands within observe_grace is not lost."""
    sc = Scenario()
    for i in range(20):
        b = sc.session(f"s{i}").starts(T0 + H)
        b.emits("memory.observe.requested", T0 + H).emits(
            "observe.store.completed", T0 + H + 15 * M
        )
    result = check(evaluate(store, sc, AT), "observe_failure_rate")
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 20)


def test_loss_is_judged_when_its_deadline_falls_in_the_window(store: Store) -> None:
    """A requested observe at `at - 10 min` is not lost yet: its deadline is after `at`."""
    sc = Scenario()
    _observes(sc, 20)
    sc.session("pending").starts(AT - 10 * M).emits("memory.observe.requested", AT - 10 * M)
    result = check(evaluate(store, sc, AT), "observe_failure_rate")
    assert (result.value, result.evidence.lost) == (0, 0)


def test_sessionless_outcomes_count_but_are_never_lost(store: Store) -> None:
    """Completed and failed events count with or without a session; loss needs a real session."""
    sc = Scenario()
    for i in range(19):
        sc.event("memory.recall.completed", T0 + H + i * S, None, meta={"latency_ms": 10})
    sc.event("memory.recall.failed", T0 + 2 * H, None)
    sc.event("memory.recall.started", T0 + 2 * H, None)  # no session: never judged for loss
    result = check(evaluate(store, sc, AT), "recall_failure_rate")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1 / 20, 20)


def test_rates_need_min_samples(store: Store) -> None:
    """Fewer than min_samples in the denominator is insufficient_data, with the value shown."""
    sc = Scenario()
    _observes(sc, 19, failed=5)
    result = check(evaluate(store, sc, AT), "observe_failure_rate")
    assert (result.status, result.value, result.sample_size) == (
        Status.INSUFFICIENT_DATA,
        5 / 19,
        19,
    )


def test_min_samples_is_configurable(store: Store) -> None:
    """`[checks.<id>] min_samples` lowers the bar."""
    sc = Scenario()
    _observes(sc, 19, failed=5)
    config = {"checks": {"observe_failure_rate": {"min_samples": 10}}}
    result = check(evaluate(store, sc, AT, config), "observe_failure_rate")
    assert result.status is Status.BREACHED


def test_no_data_when_a_role_never_appears(store: Store) -> None:
    """A check with nothing to judge is no_data with a null value, never ok."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H + S)
    report = evaluate(store, sc, AT)
    for check_id in ("observe_failure_rate", "write_gate_drift", "agent_deviation_contract"):
        result = report.checks[check_id]
        assert (result.status, result.value, result.sample_size) == (Status.NO_DATA, None, 0)


# --- recall latency p95 ----------------------------------------------------


def test_p95_is_exact_nearest_rank(store: Store) -> None:
    """p95 of 1..100 ms is the 95th value; of 1..20 it is the 19th (ceil(0.95 n))."""
    sc = Scenario()
    for i in range(1, 101):
        sc.session(f"s{i}").starts(T0 + H).recalls(T0 + H + S, latency_ms=float(i))
    assert check(evaluate(store, sc, AT), "recall_latency_p95").value == 95
    small = Scenario()
    for i in range(1, 21):
        small.session(f"s{i}").starts(T0 + H).recalls(T0 + H + S, latency_ms=float(i * 1000))
    result = check(evaluate(store, small, AT), "recall_latency_p95")
    assert (result.status, result.value) == (Status.BREACHED, 19000)


def test_latency_from_duration_ms_column(store: Store) -> None:
    """A CLI recall carries its latency in duration_ms, not in metadata."""
    sc = Scenario()
    for i in range(20):
        sc.event(
            "memory.recall.completed",
            T0 + H + i * S,
            f"s{i}",
            duration_ms=4000,
            component="recall-cli",
        )
    result = check(evaluate(store, sc, AT), "recall_latency_p95")
    assert (result.status, result.value) == (Status.BREACHED, 4000)


def test_duplicate_rows_count_once_in_p95(store: Store) -> None:
    """Duplicated rows of a recall count once in the latency sample."""
    sc = Scenario()
    for i in range(20):
        sc.session(f"s{i}").starts(T0 + H).recalls(T0 + H + S, latency_ms=100)
    for event in list(sc.events):
        if event.name == "memory.recall.completed":
            sc.duplicate(event)
    result = check(evaluate(store, sc, AT), "recall_latency_p95")
    assert result.sample_size == 20


# --- circuit breaker -------------------------------------------------------


def test_circuit_breaker_finds_the_earliest_longest_run(store: Store) -> None:
    """The longest run of consecutive failures, ordered by ts then event id; earliest wins ties."""
    sc = Scenario()
    pattern = "FFFFsFFFFsF"  # two runs of 4, the first is reported
    for i, mark in enumerate(pattern):
        name = "observe.store.failed" if mark == "F" else "observe.store.completed"
        sc.event(name, T0 + H + i * M, "s1")
    result = check(evaluate(store, sc, AT), "circuit_breaker")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 4, 11)
    assert result.evidence == Evidence(run=FailureRun(T0 + H, T0 + H + 3 * M, 4))
    assert result.evidence.to_json() == {
        "start": "2026-11-28T01:00:00Z",
        "end": "2026-11-28T01:03:00Z",
        "length": 4,
    }


def test_circuit_breaker_at_three_is_ok(store: Store) -> None:
    """Three consecutive failures do not trip the breaker (breached when > 3)."""
    sc = Scenario()
    for i, mark in enumerate("FFFs"):
        name = "memory.recall.failed" if mark == "F" else "memory.recall.completed"
        sc.event(name, T0 + H + i * M, None)
    result = check(evaluate(store, sc, AT), "circuit_breaker")
    assert (result.status, result.value) == (Status.OK, 3)


def test_circuit_breaker_value_zero_has_empty_evidence(store: Store) -> None:
    """No failure at all: value 0 and empty evidence ({} in JSON)."""
    sc = Scenario()
    sc.event("memory.recall.completed", T0 + H, None)
    result = check(evaluate(store, sc, AT), "circuit_breaker")
    assert (result.value, result.evidence.to_json()) == (0, {})


def test_circuit_breaker_summary_counts_in_the_singular_when_one(store: Store) -> None:
    """One failure among one outcome reads "1 consecutive failure among 1 outcome", and so does its run."""
    sc = Scenario()
    sc.event("memory.recall.failed", T0 + H, None)
    result = check(evaluate(store, sc, AT), "circuit_breaker")
    assert result.summary == "longest run of 1 consecutive failure among 1 outcome"
    assert [f.text for f in result.evidence.shown().facts] == [
        "1 failure from 2026-11-28T01:00:00Z to 2026-11-28T01:00:00Z"
    ]


# --- telemetry freshness ---------------------------------------------------


def test_freshness_on_an_empty_table_breaches_with_null(store: Store) -> None:
    """No event at all before `at` is breached with value null: silence is never health."""
    result = check(evaluate(store, Scenario(), AT), "telemetry_freshness")
    assert (result.status, result.value) == (Status.BREACHED, None)


def test_freshness_measures_from_the_newest_event(store: Store) -> None:
    """Freshness is the seconds from the newest event of any name (ts < at) to `at`."""
    sc = Scenario()
    sc.event("heartbeat", AT - 10 * M, None)
    sc.event("heartbeat", AT + M, None)  # after `at`: does not exist yet
    result = check(evaluate(store, sc, AT), "telemetry_freshness")
    assert (result.status, result.value) == (Status.OK, 600)


def test_freshness_older_than_lookback_still_measured(store: Store) -> None:
    """An event older than lookback still gives the exact age, and breaches."""
    sc = Scenario()
    sc.event("heartbeat", AT - 30 * H, None)
    result = check(evaluate(store, sc, AT), "telemetry_freshness")
    assert (result.status, result.value) == (Status.BREACHED, 30 * 3600)


# --- recall injection ------------------------------------------------------


def test_recall_with_results_must_be_injected(store: Store) -> None:
    """A recall_completed with result_count > 0 needs an injection within recall_grace."""
    sc = Scenario()
    sc.session("ok").starts(T0 + H).recalls(T0 + H, result_count=3).injects(T0 + H + 5 * M)
    sc.session("missed").starts(T0 + H).recalls(T0 + H, result_count=3)
    sc.session("empty").starts(T0 + H).recalls(T0 + H, result_count=0)
    result = check(evaluate(store, sc, AT), "recall_injection")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 2)
    assert result.evidence == Evidence(sessions=("missed",))


def test_recall_injection_is_no_data_without_any_injected_event(store: Store) -> None:
    """A source that never emits recall_injected cannot be judged: no_data."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H, result_count=3)
    result = check(evaluate(store, sc, AT), "recall_injection")
    assert (result.status, result.value) == (Status.NO_DATA, None)


# --- write gate drift ------------------------------------------------------


def test_write_gate_drift_is_the_discard_share(store: Store) -> None:
    """14 discards of 20 gate decisions is 70%, which breaches (>= 0.7)."""
    sc = Scenario()
    for i in range(20):
        verdict = "discard" if i < 14 else "allow"
        sc.event("memory.gate.decision", T0 + H + i * S, "s1", meta={"verdict": verdict})
    result = check(evaluate(store, sc, AT), "write_gate_drift")
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 0.7, 20)


# --- windows, replays, duplicates, sessions --------------------------------


def test_events_after_at_do_not_exist(store: Store) -> None:
    """A replay sees only events before `at`: a later recall cannot rescue a cold start."""
    sc = Scenario()
    sc.session("s1").starts(AT - 10 * M).recalls(AT + S)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_duplicates_by_id_are_counted_once(store: Store) -> None:
    """A 100% duplicated batch gives the same verdicts as the batch written once."""
    sc = Scenario()
    _observes(sc, 20, failed=2)
    once = evaluate(store, sc, AT)
    for event in list(sc.events):
        sc.duplicate(event)
    twice = evaluate(store, sc, AT)
    assert once.to_json()["checks"] == twice.to_json()["checks"]


def test_placeholder_sessions_are_ignored(store: Store) -> None:
    """Events whose only session id is a placeholder (interactive, gateway, unknown) have no session."""
    sc = Scenario()
    for placeholder in ("interactive", "gateway", "unknown"):
        sc.event("session.started", T0 + H, None, session_column=placeholder)
    result = check(evaluate(store, sc, AT), "recall_coverage")
    assert (result.status, result.sample_size) == (Status.NO_DATA, 0)


def test_ignore_list_is_configurable(store: Store) -> None:
    """`source.ignore_sessions` decides which ids are not sessions."""
    sc = Scenario()
    sc.event("session.started", T0 + H, None, session_column="interactive")
    config = {"source": {"ignore_sessions": [""]}}
    result = check(evaluate(store, sc, AT, config), "recall_coverage")
    assert (result.value, result.evidence) == (1, Evidence(sessions=("interactive",)))


def test_session_id_only_in_worker_metadata(store: Store) -> None:
    """A worker event carrying only metadata.sessionId belongs to that session."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).ends(T0 + 2 * H)
    sc.event(
        "observe.started",
        T0 + 2 * H + M,
        None,
        meta={"sessionId": "s1"},
        session_column=None,
        source="worker",
    )
    result = check(evaluate(store, sc, AT), "observe_coverage")
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_session_filter_narrows_sessions(store: Store) -> None:
    """`source.session_filter` keeps only sessions with an event matching the predicate."""
    sc = Scenario()
    sc.session("cli").starts(T0 + H)
    sc.event("session.started", T0 + H, "worker-only", source="worker")
    config = {"source": {"session_filter": "source = 'interactive'"}}
    result = check(evaluate(store, sc, AT, config), "recall_coverage")
    assert (result.value, result.sample_size) == (1, 1)


def test_a_longer_window_reads_far_enough_back(store: Store) -> None:
    """`--window 24h` judges a silent end due early in the window, whose events are 30h old."""
    sc = Scenario()
    sc.session("crashed").starts(AT - 31 * H).emits("tool.call.completed", AT - 30 * H)
    result = check(evaluate(store, sc, AT, length=timedelta(hours=24)), "observe_coverage")
    assert (result.status, result.value) == (Status.BREACHED, 1)
