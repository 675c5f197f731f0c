"""The demo generator: deterministic, inside its 24 hours, and faulty exactly as its plan says.

A small reference evaluator of docs/spec.md sections 3-5 (joelclaw preset, default
settings) reads the rows back, so the plan is checked against what the rows
actually contain rather than against the generator's own bookkeeping.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checks.base import Status
from checks.evidence import Evidence
from tests.builder import settings_for, unique_table
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.demo.data import generate_rows, write_demo
from watchdog.demo.model import JOELCLAW_COLUMNS, DemoPlan
from watchdog.runner.once import run_once, window_at

AT = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
WINDOW = timedelta(hours=4)
LOOKBACK = timedelta(hours=24)
RECALL_GRACE = timedelta(minutes=5)
OBSERVE_GRACE = timedelta(minutes=15)
IDLE_TIMEOUT = timedelta(hours=6)

PLACEHOLDERS = {"", "interactive", "gateway", "unknown"}
SESSION_END = {"session.ended", "session.shutdown"}
COMPACTION = {"session.compacted", "compaction.before"}
RECALL_STARTED = {"memory.recall.started"}
RECALL_OUTCOME = {"memory.recall.completed", "memory.recall.failed"}
RECALL = RECALL_STARTED | RECALL_OUTCOME
OBSERVE_REQUESTED = {"memory.observe.requested", "memory.observe.started", "observe.started"}
OBSERVE_COMPLETED = {"memory.observe.completed", "observe.store.completed"}
OBSERVE_FAILED = {"memory.observe.failed", "observe.store.failed"}
OBSERVE_OUTCOME = OBSERVE_COMPLETED | OBSERVE_FAILED
OBSERVE = OBSERVE_REQUESTED | OBSERVE_OUTCOME
FAILED = {"memory.recall.failed"} | OBSERVE_FAILED
HUMAN_MESSAGE = {"message.received", "gateway.message.received"}
AGENT_RESPONSE = {"message.sent", "gateway.message.sent", "agent.response"}
TRIVIAL = {"greeting", "ack", "heartbeat"}
DEVIATION_KEYS = {"agente", "tipo", "evidenceEventIds"}
ENVELOPE_KEYS = {"session.id", "session_id", "sessionId", "event.name", "event.id"}
DEVIATION_TYPES = {"laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario"}


@dataclass(frozen=True)
class Event:
    """A normalized event (docs/spec.md section 2) of the joelclaw preset."""

    id: str
    ts: datetime
    session: str
    name: str
    latency: float | None
    result_count: int | None
    payload: dict[str, Any]


def normalize(rows: Iterable[list[Any]]) -> list[Event]:
    """Each id once (the latest received), session from metadata then the column."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        record = dict(zip(JOELCLAW_COLUMNS, row, strict=True))
        seen = latest.get(record["id"])
        if seen is None or record["received_at"] > seen["received_at"]:
            latest[record["id"]] = record
    events = []
    for record in latest.values():
        meta = json.loads(record["metadata_json"])
        candidates = (meta.get("session_id"), meta.get("sessionId"), record["sessionId"])
        session = next((s for s in candidates if s), "")
        latency = meta.get("latency_ms", record["duration_ms"])
        events.append(
            Event(
                id=record["id"],
                ts=record["timestamp"],
                session="" if session in PLACEHOLDERS else session,
                name=record["action"],
                latency=None if latency is None else float(latency),
                result_count=meta.get("result_count"),
                payload=meta,
            )
        )
    return sorted(events, key=lambda e: (e.ts, e.id))


@dataclass
class Verdict:
    """What the checks of docs/spec.md section 5 would find in one window."""

    recall_unmet: set[str] = field(default_factory=set)
    observe_unmet: set[str] = field(default_factory=set)
    silent_unmet: int = 0
    end_unmet: int = 0
    compaction_unmet: int = 0
    observe_completed: int = 0
    observe_failed: int = 0
    observe_lost: int = 0
    recall_lost: int = 0
    p95: float | None = None
    slow: int = 0
    longest_failed_run: int = 0
    injection_unmet: set[str] = field(default_factory=set)
    discard_share: float | None = None
    deviation_breaches: int = 0
    deviation_missing: int = 0
    deviations: int = 0
    answered_without_recall: list[tuple[datetime, str]] = field(default_factory=list)
    questions_due: int = 0
    trivial_messages: int = 0

    @property
    def observe_failure_rate(self) -> float:
        lost_or_failed = self.observe_failed + self.observe_lost
        return lost_or_failed / (self.observe_completed + lost_or_failed)


def _any(events: list[Event], names: set[str], low: datetime, high: datetime) -> bool:
    return any(e.name in names and low <= e.ts <= high for e in events)


def _judge_sessions(events: list[Event], start: datetime, at: datetime, out: Verdict) -> None:
    """The coverage, outcome and injection obligations due in [start, at)."""
    by_session: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.session:
            by_session[event.session].append(event)

    def unmet(deadline: datetime, evs: list[Event], names: set[str], low: datetime) -> bool:
        """Due in the window, and no event of `names` in [low, deadline]."""
        return start <= deadline < at and not _any(evs, names, low, deadline)

    minute = timedelta(minutes=1)
    for sid, evs in by_session.items():
        first, last = evs[0].ts, evs[-1].ts
        if unmet(first + RECALL_GRACE, evs, RECALL, first):
            out.recall_unmet.add(sid)
        end = next((e.ts for e in evs if e.name in SESSION_END), None)
        if end is not None and unmet(end + OBSERVE_GRACE, evs, OBSERVE, end - 5 * minute):
            out.observe_unmet.add(sid)
            out.end_unmet += 1
        # A silent end is met by an observe in [last - 5m, last], judged 6h later.
        silent = start <= last + IDLE_TIMEOUT < at and not _any(
            evs, OBSERVE, last - 5 * minute, last
        )
        if end is None and silent:
            out.observe_unmet.add(sid)
            out.silent_unmet += 1
        for e in evs:
            if e.name in COMPACTION and unmet(e.ts + OBSERVE_GRACE, evs, OBSERVE, e.ts - minute):
                out.observe_unmet.add(sid)
                out.compaction_unmet += 1
            if e.name in RECALL_STARTED:
                out.recall_lost += unmet(e.ts + RECALL_GRACE, evs, RECALL_OUTCOME, e.ts)
            if e.name in OBSERVE_REQUESTED:
                out.observe_lost += unmet(e.ts + OBSERVE_GRACE, evs, OBSERVE_OUTCOME, e.ts)
            injectable = e.name == "memory.recall.completed" and (e.result_count or 0) > 0
            if injectable and unmet(e.ts + RECALL_GRACE, evs, {"memory.recall.injected"}, e.ts):
                out.injection_unmet.add(sid)
            if e.name in HUMAN_MESSAGE:
                _judge_message(e, evs, start, at, out)


def _judge_message(
    message: Event, evs: list[Event], start: datetime, at: datetime, out: Verdict
) -> None:
    """Recall before response: a recall in [message, the first reply after it or the grace]."""
    if message.payload.get("kind") in TRIVIAL:
        out.trivial_messages += 1
        return
    replies = [e.ts for e in evs if e.name in AGENT_RESPONSE and e.ts > message.ts]
    deadline = min([message.ts + RECALL_GRACE, *replies])
    if start <= deadline < at:
        out.questions_due += 1
        if not _any(evs, RECALL, message.ts, deadline):
            out.answered_without_recall.append((message.ts, message.id))


def _longest_run(outcomes: list[Event]) -> int:
    longest = current = 0
    for event in outcomes:
        current = current + 1 if event.name in FAILED else 0
        longest = max(longest, current)
    return longest


def _breaks_contract(payload: dict[str, Any]) -> bool:
    if set(payload) - DEVIATION_KEYS - ENVELOPE_KEYS:
        return True
    agente, ids = payload.get("agente"), payload.get("evidenceEventIds")
    if not isinstance(agente, str) or not agente or payload.get("tipo") not in DEVIATION_TYPES:
        return True
    if isinstance(ids, str):
        ids = json.loads(ids)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return True
    return len(ids) != len(set(ids)) or len(ids) > 20


def evaluate(events: list[Event], at: datetime) -> Verdict:
    """The default-settings checks at `at` over the window [at - 4h, at)."""
    start = at - WINDOW
    visible = [e for e in events if at - LOOKBACK <= e.ts < at]
    in_window = [e for e in visible if e.ts >= start]
    out = Verdict()
    _judge_sessions(visible, start, at, out)
    out.observe_completed = sum(e.name in OBSERVE_COMPLETED for e in in_window)
    out.observe_failed = sum(e.name in OBSERVE_FAILED for e in in_window)
    latencies = sorted(
        e.latency for e in in_window if e.name == "memory.recall.completed" and e.latency
    )
    if latencies:
        out.p95 = latencies[math.ceil(0.95 * len(latencies)) - 1]
    out.slow = sum(latency > 3000 for latency in latencies)
    out.longest_failed_run = _longest_run(
        [e for e in in_window if e.name in RECALL_OUTCOME | OBSERVE_OUTCOME]
    )
    verdicts = [e.payload["verdict"] for e in in_window if e.name == "memory.gate.decision"]
    out.discard_share = verdicts.count("discard") / len(verdicts) if verdicts else None
    known = {e.id for e in visible}
    for e in in_window:
        if e.name != "anamnese.agent_deviation":
            continue
        out.deviations += 1
        if _breaks_contract(e.payload):
            out.deviation_breaches += 1
        elif any(i not in known for i in e.payload["evidenceEventIds"]):
            out.deviation_missing += 1
    return out


@pytest.fixture(scope="module")
def demo() -> tuple[list[list[Any]], DemoPlan]:
    return generate_rows(sessions=500, seed=0, at=AT)


@pytest.fixture(scope="module")
def events(demo: tuple[list[list[Any]], DemoPlan]) -> list[Event]:
    return normalize(demo[0])


def test_same_seed_gives_the_same_rows(demo: tuple[list[list[Any]], DemoPlan]) -> None:
    again = generate_rows(sessions=500, seed=0, at=AT)
    assert again == demo
    other_rows, _ = generate_rows(sessions=500, seed=1, at=AT)
    assert other_rows != demo[0]


def test_every_event_is_in_the_day_before_at(demo: tuple[list[list[Any]], DemoPlan]) -> None:
    rows, _ = demo
    for row in rows:
        record = dict(zip(JOELCLAW_COLUMNS, row, strict=True))
        ts = record["timestamp"]
        assert ts.tzinfo is not None and ts.utcoffset() == timedelta(0)
        assert AT - LOOKBACK <= ts < AT
        assert ts.microsecond % 1000 == 0
        assert record["received_at"] >= ts
    timestamps = [row[1] for row in rows]
    assert max(timestamps) > AT - timedelta(minutes=10), "fresh telemetry up to `at`"
    assert min(timestamps) < AT - timedelta(hours=23), "sessions spread over the whole day"


def test_duplicates_share_id_and_timestamp(demo: tuple[list[list[Any]], DemoPlan]) -> None:
    rows, plan = demo
    first: dict[str, list[Any]] = {}
    duplicates = 0
    for row in rows:
        original = first.setdefault(row[0], row)
        if original is row:
            continue
        duplicates += 1
        assert row[:-1] == original[:-1], "a retried write repeats the event"
        assert row[-1] > original[-1], "and is received later"
    assert duplicates == plan.duplicates > 0
    assert len(first) == plan.events
    assert len(rows) == plan.events + plan.duplicates
    assert 0.005 <= plan.duplicates / plan.events <= 0.015


def test_rows_look_like_the_real_system(
    demo: tuple[list[list[Any]], DemoPlan], events: list[Event]
) -> None:
    rows, plan = demo
    records = [dict(zip(JOELCLAW_COLUMNS, row, strict=True)) for row in rows]
    for record in records:
        assert record["metadata_keys"] == list(json.loads(record["metadata_json"]))
        assert (record["success"] == 0) == bool(record["error"])
    sessions = {e.session for e in events if e.session}
    assert len(sessions) == plan.sessions
    per_session: defaultdict[str, int] = defaultdict(int)
    for e in events:
        if e.session:
            per_session[e.session] += 1
    assert 30 <= sum(per_session.values()) / len(per_session) <= 120
    queries = [e.payload["query"] for e in events if e.name == "memory.recall.completed"]
    assert all(30 <= len(q) <= 200 for q in queries)
    placeholders = sum(r["sessionId"] == "interactive" for r in records)
    assert placeholders > len(records) / 2, "the column is mostly a placeholder"
    workers = [r for r in records if r["source"] == "worker"]
    assert workers and all("sessionId" in r["metadata_keys"] for r in workers)
    cli = [r for r in records if r["component"] == "recall-cli"]
    assert cli and all(r["duration_ms"] and "latency_ms" not in r["metadata_keys"] for r in cli)
    background = [r for r in records if r["sessionId"] in ("gateway", "unknown")]
    assert background and not any("session_id" in r["metadata_keys"] for r in background)


def test_the_default_window_shows_exactly_the_plan(
    demo: tuple[list[list[Any]], DemoPlan], events: list[Event]
) -> None:
    _, plan = demo
    got = evaluate(events, AT)
    assert len(got.recall_unmet) == plan.cold_sessions + plan.late_recalls
    assert got.silent_unmet == plan.crashed_sessions
    assert got.end_unmet == plan.ended_without_observe
    assert got.compaction_unmet == plan.unobserved_compactions
    assert len(got.observe_unmet) == (
        plan.crashed_sessions + plan.ended_without_observe + plan.unobserved_compactions
    )
    assert got.observe_lost == plan.lost_observes
    assert got.observe_failed == plan.failed_observes
    assert got.observe_failure_rate > 0.07
    assert got.longest_failed_run == plan.failure_streak == 5
    assert got.slow == plan.slow_recalls
    assert got.p95 is not None and got.p95 >= 3000
    assert got.recall_lost == 0 and not got.injection_unmet
    assert got.discard_share is not None and got.discard_share < 0.3
    assert got.deviation_breaches == plan.deviation_breaches
    assert got.deviation_missing == plan.deviation_missing_evidence
    assert got.deviations > plan.deviation_breaches + plan.deviation_missing_evidence
    assert len(got.answered_without_recall) == plan.answered_without_recall > 0


def test_questions_answered_without_recall_are_a_small_share(
    demo: tuple[list[list[Any]], DemoPlan], events: list[Event]
) -> None:
    """The window holds many questions, a few trivial messages, and a few unanswered by recall."""
    _, plan = demo
    got = evaluate(events, AT)
    assert got.questions_due > 20 * plan.answered_without_recall
    assert got.trivial_messages > 0
    kinds = {e.payload.get("kind") for e in events if e.name in HUMAN_MESSAGE}
    assert {"greeting", "ack", "question", None} <= kinds, "a missing kind is a question too"


def test_cold_and_late_starts_are_told_apart(
    demo: tuple[list[list[Any]], DemoPlan], events: list[Event]
) -> None:
    _, plan = demo
    got = evaluate(events, AT)
    first_recall: dict[str, datetime] = {}
    first_seen: dict[str, datetime] = {}
    for e in events:
        if e.session:
            first_seen.setdefault(e.session, e.ts)
            if e.name in RECALL:
                first_recall.setdefault(e.session, e.ts)
    late = [s for s in got.recall_unmet if s in first_recall]
    for sid in late:
        delay = first_recall[sid] - first_seen[sid]
        assert timedelta(minutes=6) <= delay <= timedelta(minutes=10)
    cold = [s for s in got.recall_unmet if s not in first_recall]
    assert (len(cold), len(late)) == (plan.cold_sessions, plan.late_recalls)


@pytest.mark.parametrize("hours_back", [4, 8, 12, 16, 20])
def test_earlier_windows_are_healthy(events: list[Event], hours_back: int) -> None:
    got = evaluate(events, AT - timedelta(hours=hours_back))
    assert not got.recall_unmet and not got.observe_unmet and not got.injection_unmet
    assert got.observe_failed == got.observe_lost == got.recall_lost == 0
    assert got.p95 is not None and got.p95 < 3000 and got.slow == 0
    assert got.deviation_breaches == got.deviation_missing == 0
    assert not got.answered_without_recall and got.questions_due > 0


@pytest.mark.parametrize(("sessions", "seed"), [(100, 1), (100, 2), (1000, 3)])
def test_other_sizes_and_seeds_keep_their_plan(sessions: int, seed: int) -> None:
    rows, plan = generate_rows(sessions=sessions, seed=seed, at=AT)
    got = evaluate(normalize(rows), AT)
    assert plan.sessions == sessions
    assert len(got.recall_unmet) == plan.cold_sessions + plan.late_recalls
    assert len(got.observe_unmet) == (
        plan.crashed_sessions + plan.ended_without_observe + plan.unobserved_compactions
    )
    assert got.observe_lost == plan.lost_observes
    assert got.observe_failed == plan.failed_observes
    assert got.observe_failure_rate > 0.05
    assert got.longest_failed_run == plan.failure_streak
    assert got.p95 is not None and got.p95 >= 3000
    assert got.deviation_breaches == plan.deviation_breaches
    assert got.deviation_missing == plan.deviation_missing_evidence
    assert len(got.answered_without_recall) == plan.answered_without_recall


def test_too_few_sessions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        generate_rows(sessions=10, at=AT)


def test_write_demo_fills_an_embedded_store(store: Store) -> None:
    """The demo data lands in a joelclaw table of the embedded store."""
    table = unique_table()
    plan = write_demo(store, table, sessions=500, seed=0, at=AT)
    stats = store.query(
        "SELECT count() AS n, uniqExact(id) AS ids, min(timestamp) AS lo,"
        f" max(timestamp) AS hi, countIf(sessionId IS NULL) AS nulls FROM {table}"
    ).first()
    recalls = store.query(
        f"SELECT count() FROM {table} WHERE action = {{name:String}} AND component = 'recall-cli'",
        {"name": "memory.recall.completed"},
    ).rows[0][0]
    assert stats["ids"] == plan.events
    assert plan.events <= stats["n"] <= plan.events + plan.duplicates
    first, last = (stats[key].replace(tzinfo=UTC) for key in ("lo", "hi"))
    assert first >= AT - LOOKBACK and last < AT
    assert stats["nulls"] > 0, "worker events leave the column empty"
    assert recalls > 0


AT_OLD = "2020-01-01T04:00:00Z"  # far beyond the joelclaw table's 180-day TTL


@pytest.mark.slow
def test_a_demo_long_in_the_past_keeps_its_data(tmp_path: Path) -> None:
    """`demo --at` older than the source table's retention TTL still judges its faults."""
    store = f"chdb://{tmp_path / 'store'}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "watchdog",
            "demo",
            "--sessions",
            "100",
            "--at",
            AT_OLD,
            "--store",
            store,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [line.split() for line in done.stdout.splitlines()]
    verdicts = {words[2]: words[1] for words in lines if words and words[0] in "✓✗?~!"}
    assert verdicts["telemetry_freshness"] == "ok"
    assert verdicts["recall_coverage"] == "breached"


def test_the_demos_retried_rows_exist_in_the_table_and_the_report_counts_each(
    store: Store,
) -> None:
    """Retries are a later insert: the table holds them, and data_quality.duplicate_rows is plan.duplicates."""
    table = unique_table()
    plan = write_demo(store, table, sessions=100, seed=1, at=AT)
    stats = store.query(f"SELECT count() AS n, uniqExact(id) AS ids FROM {table}").first()
    assert (stats["ids"], stats["n"] - stats["ids"]) == (plan.events, plan.duplicates)
    assert plan.duplicates > 0
    settings = settings_for(table)
    report = run_once(store, settings, window_at(settings, AT))
    assert report.data_quality["duplicate_rows"] == plan.duplicates


RUN_DEMO = """
import json, sys
from datetime import UTC, datetime
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import open_store
from watchdog.demo.run import DEMO_TABLE, demo_settings, run_demo
settings = demo_settings(settings_from_mapping({"store": {"url": sys.argv[1]}}, env={}))
demo = run_demo(settings, sessions=100, seed=1, at=datetime(2026, 11, 28, 4, tzinfo=UTC))
with open_store(sys.argv[1]) as store:
    left = store.query(f"SELECT count() - uniqExact(id) FROM {DEMO_TABLE}").rows[0][0]
print(json.dumps([demo.plan.duplicates, demo.report.data_quality["duplicate_rows"], left]))
"""


@pytest.mark.slow
def test_the_demo_report_counts_what_it_announces_and_leaves_the_retries_merged(
    tmp_path: Path,
) -> None:
    """The demo's own report counts every retry it announces; after it, the table is merged (0 left)."""
    store = f"chdb://{tmp_path / 'store'}"
    done = subprocess.run(
        [sys.executable, "-c", RUN_DEMO, store],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=Path(__file__).parents[1],
    )
    announced, counted, left = json.loads(done.stdout.strip().splitlines()[-1])
    assert announced > 0 and (counted, left) == (announced, 0)


def test_the_watchdog_finds_the_unrecalled_answers_of_the_plan(
    store: Store, events: list[Event]
) -> None:
    """On the demo store, recall_before_response breaches with the plan's messages as evidence."""
    table = unique_table()
    plan = write_demo(store, table, sessions=500, seed=0, at=AT)
    settings = settings_from_mapping({"source": {"table": table}}, env={})
    result = run_once(store, settings, window_at(settings, AT)).checks["recall_before_response"]
    expected = evaluate(events, AT)
    assert (result.status, result.value) == (Status.BREACHED, plan.answered_without_recall)
    assert result.sample_size == expected.questions_due
    assert result.evidence == Evidence(
        events=tuple(i for _, i in sorted(expected.answered_without_recall))
    )
