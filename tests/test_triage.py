"""The triage breakdown: failing items grouped by the source's dimensions, in ClickHouse."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from checks.base import Report, Status
from checks.breakdown import Dimension, FailingSession, Group, Triage
from checks.builtin import configured_checks
from checks.evaluate import complete_triage
from checks.kinds.outcome_rate import LOST_CLASS
from checks.sources import open_source
from checks.triage import error_class
from tests.builder import (
    T0,
    H,
    M,
    S,
    Scenario,
    settings_for,
    unique_table,
)
from tests.exporter import Span, write_otel_logs, write_otel_traces
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.page import render_page
from watchdog.runner.once import run_once, window_at

AT = T0 + 4 * H
MS = timedelta(milliseconds=1)
SECRET = "PAYLOAD-SECRET-7"
QUOTED_SECRET = "user-secret-a"
RATES = {"checks": {"observe_failure_rate": {"min_samples": 0}}}


def run(
    store: Store, sc: Scenario, config: dict[str, Any] | None = None
) -> tuple[Report, Settings]:
    """Write the scenario, evaluate the window ending at AT with its triage (as `check
    --format json` does: the scans carry what they can, the kinds query the rest)."""
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table, config)
    return run_once(store, settings, window_at(settings, AT), triage=True), settings


def failure_mix() -> Scenario:
    """6 failed observes in 3 error classes, 2 lost, 4 completed; a payload secret on each."""
    sc = Scenario()
    errors = [
        ("worker", "observe", "store timeout after 30s for id 4821"),
        ("worker", "observe", "store timeout after 45s for id 1234"),
        ("worker", "observe", "store timeout after 12s for id 77"),
        ("worker", "observe", f"qdrant upsert failed: 503 for point '{QUOTED_SECRET}'"),
        ("worker", "observe", 'qdrant upsert failed: 502 for point "other-point"'),
        (
            "interactive",
            "memory-enforcer",
            "embedding failed for 5b0e1c2a-1111-2222-3333-444455556666 at https://emb.internal/v1?key=abc",
        ),
    ]
    for i, (source, component, error) in enumerate(errors):
        sc.event(
            "observe.store.failed",
            T0 + H + i * M,
            f"f{i}",
            success=0,
            error=error,
            source=source,
            component=component,
            meta={"query": SECRET},
        )
    for i in range(2):  # requested, never finished: lost once observe_grace has passed
        sc.event("memory.observe.requested", T0 + 2 * H + i * M, f"l{i}", meta={"query": SECRET})
    for i in range(4):
        sc.event(
            "observe.store.completed",
            T0 + 3 * H + i * M,
            f"c{i}",
            source="worker",
            component="observe",
            meta={"query": SECRET},
        )
    return sc


def groups(report: Report, check_id: str) -> dict[str, list[tuple[str, int, float]]]:
    found = report.triage[check_id].dimensions
    return {d.name: [(g.value, g.count, g.share) for g in d.groups] for d in found}


def test_failure_groups_counts_and_shares_are_exact(store: Store) -> None:
    """Failed and lost observes are grouped by outcome, source, component and error class."""
    report, _ = run(store, failure_mix(), RATES)
    result = report.checks["observe_failure_rate"]
    assert (result.status, result.value) == (Status.BREACHED, 8 / 12)
    assert report.triage["observe_failure_rate"].items == 8
    assert groups(report, "observe_failure_rate") == {
        "outcome": [("failed", 6, 6 / 8), ("lost", 2, 2 / 8)],
        "source": [("worker", 5, 5 / 8), ("interactive", 3, 3 / 8)],
        "component": [("observe", 5, 5 / 8), ("memory-enforcer", 3, 3 / 8)],
        "error": [
            ("store timeout after <n> for id <n>", 3, 3 / 8),
            (LOST_CLASS, 2, 2 / 8),
            ("qdrant upsert failed: <n> for point <q>", 2, 2 / 8),
            ("embedding failed for <id> at <url>", 1, 1 / 8),
        ],
    }


def test_error_classes_merge_messages_differing_only_in_ids_and_numbers(store: Store) -> None:
    """Numbers, ids, UUIDs, quoted values, URLs and addresses are stripped; classes are cut."""
    messages = [
        "timeout after 30s for session ab12cd34ef",
        "timeout after 4.5s for session ev-000123",
        "timeout after 120ms for session 5b0e1c2a-1111-2222-3333-444455556666",
        "user 'alice' not found",
        'user "bob" not found',
        "mail to alice@example.com bounced",
        "GET https://api.example.com/v1/items/99 failed",
        "x" * 200,
    ]
    rows = store.query(
        f"SELECT {error_class('m')} AS c FROM (SELECT arrayJoin({{msgs:Array(String)}}) AS m)",
        {"msgs": messages, **_patterns()},
    ).rows
    classes = [c for (c,) in rows]
    assert classes[:3] == ["timeout after <n> for session <id>"] * 3
    assert classes[3:5] == ["user <q> not found"] * 2
    assert classes[5] == "mail to <email> bounced"
    assert classes[6] == "GET <url> failed"
    assert classes[7] == "x" * 120


def _patterns() -> dict[str, str]:
    from checks.triage import NORMALISE

    return {name: pattern for name, pattern, _ in NORMALISE}


def test_no_payload_value_or_raw_error_text_anywhere(store: Store) -> None:
    """Neither payload values nor the ids and quoted values of error text reach JSON or page."""
    report, settings = run(store, failure_mix(), RATES)
    document = json.dumps(report.to_json())
    page = render_page(report, settings=settings)
    for text in (document, page):
        assert SECRET not in text
        assert QUOTED_SECRET not in text
        assert "4821" not in text and "emb.internal" not in text


def test_error_classes_off_leaves_error_text_out(store: Store) -> None:
    """With report.error_classes off, failing items are grouped without any error text."""
    report, settings = run(store, failure_mix(), {**RATES, "report": {"error_classes": False}})
    assert set(groups(report, "observe_failure_rate")) == {"outcome", "source", "component"}
    page = render_page(report, settings=settings)
    assert "store timeout" not in json.dumps(report.to_json()) and "store timeout" not in page


def test_only_breached_checks_get_a_breakdown(store: Store) -> None:
    """Checks that did not breach have no triage entry; none at all leaves the key out."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).recalls(T0 + H + S).observes(T0 + 2 * H).ends(T0 + 2 * H)
    report, _ = run(store, sc)
    assert report.status is Status.OK
    assert report.triage == {}
    assert "triage" not in report.to_json()


def test_coverage_breaches_list_sessions_and_missed_obligations(store: Store) -> None:
    """Coverage breaches list their sessions: first and last seen, events, what was missed."""
    sc = Scenario()
    sc.event("session.started", AT - 8 * H, "crashed", source="gateway", component="pi")
    sc.session("crashed").recalls(AT - 8 * H + S).emits("tool.call.completed", AT - 6 * H - MS)
    sc.session("ended").starts(T0 + H).recalls(T0 + H + S).ends(T0 + 2 * H)
    b = sc.session("compacted").starts(T0 + H + M).recalls(T0 + H + M + S)
    b.compacts(T0 + 2 * H).observes(T0 + 3 * H).ends(T0 + 3 * H)
    sc.session("cold").starts(T0 + 30 * M).emits("tool.call.completed", T0 + 40 * M)
    report, _ = run(store, sc)
    observe = report.triage["observe_coverage"]
    assert observe.noun == "sessions" and observe.items == 3
    assert [
        (s["session_id"], s["first_seen"], s["last_seen"], s["events"], s["missed"])
        for s in observe.to_json()["sessions"]
    ] == [
        (
            "crashed",
            "2026-11-27T20:00:00Z",
            "2026-11-27T21:59:59.999Z",
            4,
            ["end observe (silent end)"],
        ),
        ("ended", "2026-11-28T01:00:00Z", "2026-11-28T02:00:00Z", 4, ["end observe (end event)"]),
        ("compacted", "2026-11-28T01:01:00Z", "2026-11-28T03:00:01Z", 7, ["compaction observe"]),
    ]
    # A session's dimensions are those of its first event.
    assert groups(report, "observe_coverage")["source"] == [
        ("interactive", 2, 2 / 3),
        ("gateway", 1, 1 / 3),
    ]
    cold = report.triage["recall_coverage"].sessions or ()
    assert [(s.session_id, s.events, s.missed) for s in cold] == [("cold", 2, ("start recall",))]


def test_circuit_breaker_groups_the_streak_only(store: Store) -> None:
    """The breaker's items are the failures of its longest run, not every failure in W."""
    sc = Scenario()
    s = sc.session("s1").starts(T0 + H).recalls(T0 + H + S)
    s.emits("memory.recall.failed", T0 + H + M, success=0, error="recall timeout after 3s")
    s.recalls(T0 + H + 2 * M)
    for i in range(4):
        s.emits(
            "memory.recall.failed",
            T0 + 2 * H + i * M,
            success=0,
            error=f"qdrant 503 on shard {i}",
            component="recall",
        )
    report, _ = run(store, sc)
    assert report.checks["circuit_breaker"].status is Status.BREACHED
    assert report.triage["circuit_breaker"].items == 4
    assert groups(report, "circuit_breaker")["error"] == [("qdrant <n> on shard <n>", 4, 1.0)]
    assert groups(report, "circuit_breaker")["component"] == [("recall", 4, 1.0)]


def test_otel_logs_group_by_service_and_severity(store: Store) -> None:
    """On the otel_logs preset, slow recalls group by ServiceName and SeverityText."""
    sc = Scenario()
    for i in range(3):
        sc.session(f"s{i}").starts(T0 + H + i * M).recalls(T0 + H + i * M + S, latency_ms=5000)
    table = unique_table().replace("otel_events", "otel_logs")
    write_otel_logs(store, table, sc)
    config = {
        "source": {"preset": "otel_logs", "table": table},
        "checks": {"recall_latency_p95": {"min_samples": 0}},
    }
    settings = settings_for(table, config)
    report = run_once(store, settings, window_at(settings, AT), triage=True)
    assert report.checks["recall_latency_p95"].status is Status.BREACHED
    assert groups(report, "recall_latency_p95") == {
        "ServiceName": [("svc", 3, 1.0)],
        "SeverityText": [("INFO", 3, 1.0)],
    }


def test_otel_traces_failed_spans_group_by_service(store: Store) -> None:
    """On the otel_traces preset, failed recall spans group by ServiceName."""
    spans = [Span("memory.recall", T0 + H + i * M, 100, f"s{i}", status="Error") for i in range(4)]
    spans += [Span("memory.recall", T0 + 2 * H + i * M, 100, f"t{i}") for i in range(4)]
    table = unique_table().replace("otel_events", "otel_traces")
    write_otel_traces(store, table, spans)
    config = {
        "source": {"preset": "otel_traces", "table": table},
        "checks": {"recall_failure_rate": {"min_samples": 0}},
    }
    settings = settings_for(table, config)
    report = run_once(store, settings, window_at(settings, AT), triage=True)
    assert report.checks["recall_failure_rate"].status is Status.BREACHED
    found = groups(report, "recall_failure_rate")
    assert found["outcome"] == [("failed", 4, 1.0)]
    assert found["ServiceName"] == [("agent", 4, 1.0)]


def test_a_failing_breakdown_is_reported_not_raised(store: Store) -> None:
    """A breakdown whose query fails says so in its entry; the others still run."""
    table = unique_table()
    failure_mix().write(store, table)
    settings = settings_for(table, RATES)
    report = run_once(store, settings, window_at(settings, AT))
    source = open_source(store, settings.source)
    broken = replace(source, dims={**source.dims, "component": "nonsense_column"})
    found = complete_triage(store, broken, configured_checks(settings), report).triage
    assert "could not compute the breakdown" in found["observe_failure_rate"].error
    assert found["observe_failure_rate"].to_json() == {"error": found["observe_failure_rate"].error}


def test_triage_json_keeps_its_shape() -> None:
    """A breakdown's JSON is items, groups by dimension, noun, then a coverage check's sessions."""
    session = FailingSession("s1", T0 + H, T0 + H + 90 * MS, 4, ("start recall", "end observe x2"))
    found = Triage(
        items=1,
        noun="sessions",
        dimensions=(Dimension("source", (Group("worker", 1, 1.0),)),),
        sessions=(session,),
    )
    assert found.to_json() == {
        "items": 1,
        "groups": {"source": [{"value": "worker", "count": 1, "share": 1.0}]},
        "noun": "sessions",
        "sessions": [
            {
                "session_id": "s1",
                "first_seen": "2026-11-28T01:00:00Z",
                "last_seen": "2026-11-28T01:00:00.090Z",
                "events": 4,
                "missed": ["start recall", "end observe x2"],
            }
        ],
    }
    assert list(found.to_json()) == ["items", "groups", "noun", "sessions"]
    assert list(replace(found, sessions=None, noun="events").to_json()) == [
        "items",
        "groups",
        "noun",
    ]


def test_triage_carried_by_the_evaluation_equals_the_breakdown_queries(store: Store) -> None:
    """The breakdown the session and window queries carry is the one triage's own queries give."""
    sc = failure_mix()
    sc.event("session.started", AT - 8 * H, "crashed", source="gateway", component="pi")
    sc.session("crashed").recalls(AT - 8 * H + S).emits("tool.call.completed", AT - 6 * H - MS)
    sc.session("cold").starts(T0 + 30 * M).emits("tool.call.completed", T0 + 40 * M)
    for i in range(3):
        sc.session(f"slow{i}").starts(T0 + H + i * M).recalls(T0 + H + i * M + S, latency_ms=5000)
    good = {"agente": "po", "tipo": "laco", "evidenceEventIds": []}
    d = sc.session("deviant").starts(T0 + H)
    d.deviates(T0 + H + M, {**good, "nota": "x"}, component="anamnese")
    d.deviates(T0 + H + 2 * M, {**good, "evidenceEventIds": ["ghost-1", "ghost-2"]})
    d.deviates(T0 + H + 3 * M, {**good, "evidenceEventIds": ["ghost-3"]}, source="worker")
    table = unique_table()
    sc.write(store, table)
    config = {"checks": {"observe_failure_rate": {"min_samples": 0}}}
    config["checks"]["recall_latency_p95"] = {"min_samples": 0}
    settings = settings_for(table, config)
    window = window_at(settings, AT)
    carried = run_once(store, settings, window, triage=True)
    assert {
        "recall_coverage",
        "observe_coverage",
        "observe_failure_rate",  # its lost events found by the session scan, not found again
        "recall_latency_p95",
        "agent_deviation_contract",
        "agent_deviation_evidence",
    } <= set(carried.triage)
    specs = configured_checks(settings)
    source = open_source(store, settings.source)
    separate = complete_triage(store, source, specs, run_once(store, settings, window))
    assert carried.to_json() == separate.to_json()


def test_the_carried_lost_events_at_the_edges_of_their_read_range(store: Store) -> None:
    """The triage reads the lost events the scan carried only where they can lie (a start whose
    deadline, ts + grace, falls in W): the starts at the range's two edges are found, and one
    due just before W is not."""
    grace = 15 * M
    ws = AT - 4 * H
    sc = Scenario()
    edges = {"first": ws - grace, "last": AT - grace - MS, "early": ws - grace - MS}
    for item, ts in edges.items():
        sc.event("memory.observe.requested", ts, item, source="worker", component=item)
    for i in range(3):
        sc.event("observe.store.completed", T0 + H + i * M, f"c{i}", source="worker")
    report, settings = run(store, sc, RATES)
    assert report.checks["observe_failure_rate"].evidence.lost == 2
    assert ("lost", 2, 1.0) in groups(report, "observe_failure_rate")["outcome"]
    components = {g[0] for g in groups(report, "observe_failure_rate")["component"]}
    assert components == {"first", "last"}
    specs = configured_checks(settings)
    source = open_source(store, settings.source)
    window = window_at(settings, AT)
    separate = complete_triage(store, source, specs, run_once(store, settings, window))
    assert report.triage["observe_failure_rate"] == separate.triage["observe_failure_rate"]
