"""The demo generator: deterministic, inside its 24 hours, and faulty exactly as its plan says.

A small reference evaluator of docs/spec.md sections 3-5 (joelclaw preset, default
settings) reads the rows back, so the plan is checked against what the rows
actually contain rather than against the generator's own bookkeeping.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checks.base import Status
from checks.evidence import Evidence, ListedEvent
from tests.builder import settings_for, unique_table
from tests.demo_oracle import (
    AT,
    HUMAN_MESSAGE,
    LOOKBACK,
    RECALL,
    Event,
    evaluate,
    normalize,
)
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.demo.data import generate_rows, write_demo
from watchdog.demo.model import JOELCLAW_COLUMNS, DemoPlan
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS


@pytest.fixture(scope="module")
def demo() -> tuple[list[list[Any]], DemoPlan]:
    return generate_rows(sessions=500, seed=0, at=AT)


@pytest.fixture(scope="module")
def events(demo: tuple[list[list[Any]], DemoPlan]) -> list[Event]:
    return normalize(demo[0])


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
from watchdog.runner.plugins import PLUGINS
settings = demo_settings(
    settings_from_mapping({"store": {"url": sys.argv[1]}}, plugins=PLUGINS, env={})
)
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
    settings = settings_from_mapping({"source": {"table": table}}, plugins=PLUGINS, env={})
    result = run_once(store, settings, window_at(settings, AT)).checks["recall_before_response"]
    expected = evaluate(events, AT)
    assert (result.status, result.value) == (Status.BREACHED, plan.answered_without_recall)
    assert result.sample_size == expected.questions_due
    listed = tuple(i for _, i in sorted(expected.answered_without_recall))
    by_id = {e.id: e for e in events}
    details = tuple(
        ListedEvent(i, by_id[i].name, by_id[i].session, by_id[i].latency) for i in listed
    )
    assert result.evidence == Evidence(events=listed, details=details)
