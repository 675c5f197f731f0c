"""Malformed data gives a defined result and is counted by reason in `data_quality`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from checks.base import Status
from tests.builder import T0, H, M, S, Scenario, evaluate, settings_for, unique_table
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at

AT = T0 + 4 * H


def _recalls(sc: Scenario, n: int, latency: float = 100) -> None:
    for i in range(n):
        sc.session(f"ok{i}").starts(T0 + H).recalls(T0 + H + S, latency_ms=latency)


def test_bad_latencies_are_ignored_and_counted(store: Store) -> None:
    """Negative, non-numeric and infinite latencies are left out of the p95 and counted."""
    sc = Scenario()
    _recalls(sc, 20)
    for i, raw in enumerate(["-5", '"fast"', '"1e999"', "-0.5"]):
        sc.event(
            "memory.recall.completed",
            T0 + H + i * S,
            f"bad{i}",
            metadata_json=f'{{"latency_ms": {raw}}}',
        )
    report = evaluate(store, sc, AT)
    p95 = report.checks["recall_latency_p95"]
    assert (p95.value, p95.sample_size) == (100, 20)
    assert report.data_quality["latency_ignored"] == 4


def test_malformed_metadata_is_counted_and_never_crashes(store: Store) -> None:
    """Metadata that is not JSON, a JSON array, or deeply nested gives defined results."""
    sc = Scenario()
    _recalls(sc, 20)
    nested = "[" * 5000 + "]" * 5000
    for i, text in enumerate(["not json", "[1, 2]", nested, '{"session_id": ' + nested + "}"]):
        sc.event("memory.recall.completed", T0 + H + i * S, None, metadata_json=text)
    report = evaluate(store, sc, AT)
    assert report.data_quality["payload_not_json_object"] >= 3
    assert report.checks["recall_coverage"].value == 0  # the other rows keep their verdicts
    assert report.checks["recall_failure_rate"].evidence.completed == 24


def test_a_one_megabyte_value_is_fine(store: Store) -> None:
    """A 1 MB metadata value does not disturb the verdicts."""
    sc = Scenario()
    _recalls(sc, 20)
    sc.event(
        "memory.recall.completed", T0 + H, "big", meta={"query": "x" * 1_000_000, "latency_ms": 100}
    )
    report = evaluate(store, sc, AT)
    assert report.checks["recall_latency_p95"].value == 100


def test_sql_in_names_and_ids_is_data(store: Store) -> None:
    """An event name or session id carrying SQL is just a string."""
    sc = Scenario()
    hostile = "x'); DROP TABLE joelclaw.otel_events; --{evil:String} $1"
    sc.session(hostile).starts(T0 + H)
    sc.event(hostile, T0 + H, hostile)
    report = evaluate(store, sc, AT)
    assert report.checks["recall_coverage"].evidence.sessions == (hostile,)


def test_nul_bytes_invalid_utf8_and_long_ids(store: Store) -> None:
    """NUL bytes, invalid UTF-8 and 10 KB session ids are kept as they are and counted."""
    sc = Scenario()
    long_id = "s" * 10_000
    sc.session(long_id).starts(T0 + H)
    sc.session("nul\x00id").starts(T0 + H).recalls(T0 + H + S)
    sc.event("session.started", T0 + H, None, metadata_json='{"session_id": "bad\\udcff"}')
    report = evaluate(store, sc, AT)
    assert report.data_quality["session_id_over_1kib"] == 1
    assert long_id in (report.checks["recall_coverage"].evidence.sessions or ())
    json.dumps(report.to_json())  # serialisable whatever the bytes


def test_timestamps_outside_the_read_range_are_ignored(store: Store) -> None:
    """Events in the future of `at` or before 1970 do not exist for the evaluation."""
    sc = Scenario()
    sc.event("session.started", datetime(1969, 12, 31, tzinfo=UTC), "old")
    sc.event("session.started", AT + 1000 * H, "future")
    sc.session("s1").starts(T0 + H).recalls(T0 + H + M)
    report = evaluate(store, sc, AT)
    assert report.checks["recall_coverage"].sample_size == 1
    assert report.checks["telemetry_freshness"].status is Status.OK


def test_many_events_in_one_session(store: Store) -> None:
    """10^5 events in one session are one session."""
    sc = Scenario()
    sc.session("busy").starts(T0 + H).recalls(T0 + H + S)
    for i in range(100_000):
        sc.event("tool.call.completed", T0 + H + i * 10 * (S / 100), "busy")
    report = evaluate(store, sc, AT)
    assert (
        report.checks["recall_coverage"].value,
        report.checks["recall_coverage"].sample_size,
    ) == (0, 1)


def test_a_fully_duplicated_batch_changes_nothing(store: Store) -> None:
    """The same batch inserted twice gives the same verdicts, and the duplicates are counted."""
    sc = Scenario()
    for i in range(20):
        sc.session(f"s{i}").starts(T0 + H).recalls(T0 + H + S).observes(T0 + H + M, fails=i < 3)
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table)
    once = run_once(store, settings, window_at(settings, AT))
    sc.write(store, table)  # a second insert: a separate part, as retries arrive
    twice = run_once(store, settings, window_at(settings, AT))
    assert once.to_json()["checks"] == twice.to_json()["checks"]
    assert twice.data_quality["duplicate_rows"] == len(sc.events) - 20  # session.started is no role
