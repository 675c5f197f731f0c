"""Data faults that tests/test_data_quality.py does not cover: each has a defined result.

That file pins the joelclaw preset's malformed metadata, bad latencies, NUL
bytes, long ids, timestamps outside the read range, 10^5 events and a
duplicated batch. Here: the otel_logs preset's string attributes, raw
invalid UTF-8 bytes (not JSON escapes), rows without an event id duplicated
whole, and clocks running ahead of the wall clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from checks.base import Status
from tests.builder import (
    T0,
    H,
    M,
    S,
    Scenario,
    evaluate_table,
    settings_for,
    unique_table,
)
from tests.exporter import write_otel_logs
from tests.faults.chserver import ClickHouseHTTPServer
from watchdog.core.store import Store
from watchdog.report.text import render_text
from watchdog.runner.once import run_once, window_at

AT = T0 + 4 * H
OTEL = {"source": {"preset": "otel_logs"}}
BIN = Path(sys.executable).parent / "memory-watchdog"


def otel_table() -> str:
    return unique_table().replace("otel_events", "otel_logs")


def healthy(sc: Scenario, n: int = 20) -> Scenario:
    for i in range(n):
        sc.session(f"ok{i}").starts(T0 + H).recalls(T0 + H + S, latency_ms=100).ends(
            T0 + 2 * H
        ).observes(T0 + 2 * H + M)
    return sc


def test_otel_string_latencies_that_are_not_numbers_are_ignored_and_counted(store: Store) -> None:
    """otel_logs attributes are text: non-numeric, negative, NaN and infinite latencies are counted, not used."""
    sc = healthy(Scenario())
    bad = ["fast", "-5", "nan", "inf", "1e999", "0x10", "1,5", "12 ms"]
    for i, raw in enumerate(bad):
        sc.event("memory.recall.completed", T0 + H + i * S, f"bad{i}", meta={"latency_ms": raw})
    sc.event("memory.recall.completed", T0 + H, "blank", meta={"latency_ms": ""})  # absent
    table = otel_table()
    write_otel_logs(store, table, sc)
    report = evaluate_table(store, table, AT, OTEL)
    p95 = report.checks["recall_latency_p95"]
    assert (p95.value, p95.sample_size) == (100, 20)
    assert report.data_quality["latency_ignored"] == len(bad)
    # The events still count as completed recalls: only their latency is set aside.
    assert report.checks["recall_failure_rate"].evidence.completed == 20 + len(bad) + 1


def _insert_raw(store: Store, table: str, rows: list[tuple[str, str, str, str]]) -> None:
    """Rows whose action and metadata are SQL expressions (raw bytes through unhex)."""
    selects = [
        f"SELECT '{event_id}', toDateTime64('{ts}', 3, 'UTC'), NULL, {action}, {metadata}, now64(3)"
        for event_id, ts, action, metadata in rows
    ]
    store.command(
        f"INSERT INTO {table} (id, timestamp, sessionId, action, metadata_json, received_at) "
        + " UNION ALL ".join(selects)
    )


def test_raw_invalid_utf8_bytes_are_kept_counted_and_rendered(store: Store) -> None:
    """Raw invalid UTF-8 in a name or in metadata is counted, and the reports still render.

    The fields are read from such metadata as ClickHouse can read them: the
    session `s\\xff\\xfe` exists (its bad bytes shown as U+FFFD) and started without recall.
    """
    sc = healthy(Scenario())
    table = unique_table()
    sc.write(store, table)
    # \xff\xfe is never valid UTF-8; written as bytes, the way a broken agent would.
    _insert_raw(
        store,
        table,
        [
            (
                "bad-1",
                "2026-11-28 01:00:00",
                "'session.started'",
                "concat('{\"session_id\": \"s', unhex('FFFE'), '\"}')",
            ),
            (
                "bad-2",
                "2026-11-28 01:00:01",
                "concat('memory.recall.', unhex('C3'))",
                '\'{"session_id": "ok1"}\'',
            ),
        ],
    )
    settings = settings_for(table)
    report = run_once(store, settings, window_at(settings, AT))
    assert report.data_quality["invalid_utf8"] == 2
    assert report.data_quality["payload_not_json_object"] == 0
    coverage = report.checks["recall_coverage"]
    assert (coverage.status, coverage.value, coverage.sample_size) == (Status.BREACHED, 1, 21)
    assert coverage.evidence.sessions == ("s\ufffd",)  # the bad bytes as one U+FFFD
    json.dumps(report.to_json())
    render_text(report, color=False)


def test_a_recall_whose_query_was_cut_mid_character_still_counts(store: Store) -> None:
    """Metadata with a query cut inside a UTF-8 character keeps its session id: no false cold start."""
    sc = healthy(Scenario())
    sc.session("cut").starts(T0 + H)
    table = unique_table()
    sc.write(store, table)
    _insert_raw(
        store,
        table,
        [
            (
                "cut-recall",
                "2026-11-28 01:00:02",
                "'memory.recall.started'",
                'concat(\'{"session_id": "cut", "query": "caf\', unhex(\'C3\'),'
                ' \'", "latency_ms": 12}\')',
            ),
        ],
    )
    settings = settings_for(table)
    report = run_once(store, settings, window_at(settings, AT))
    coverage = report.checks["recall_coverage"]
    assert (coverage.status, coverage.value, coverage.sample_size) == (Status.OK, 0, 21)


def test_a_session_without_recall_and_a_bad_byte_elsewhere_is_still_a_cold_start(
    store: Store,
) -> None:
    """A bad byte in an unrelated field never hides the session from the coverage checks."""
    sc = healthy(Scenario())
    table = unique_table()
    sc.write(store, table)
    _insert_raw(
        store,
        table,
        [
            (
                "cold-start",
                "2026-11-28 01:00:00",
                "'session.started'",
                'concat(\'{"session_id": "cold", "cwd": "/home/\', unhex(\'FF\'), \'"}\')',
            ),
            (
                "cold-end",
                "2026-11-28 01:30:00",
                "'session.ended'",
                'concat(\'{"session_id": "cold", "note": "\', unhex(\'FE\'), \'"}\')',
            ),
        ],
    )
    settings = settings_for(table)
    report = run_once(store, settings, window_at(settings, AT))
    recall = report.checks["recall_coverage"]
    observe = report.checks["observe_coverage"]
    assert (recall.value, recall.evidence.sessions) == (1, ("cold",))
    assert (observe.value, observe.evidence.sessions) == (1, ("cold",))


def test_metadata_that_cannot_be_read_at_all_is_said_in_the_report(store: Store) -> None:
    """Metadata that is no JSON object loses its session id: the report says how many and where."""
    sc = healthy(Scenario())
    table = unique_table()
    sc.write(store, table)
    _insert_raw(
        store,
        table,
        [
            ("trunc-1", "2026-11-28 01:00:00", "'session.started'", '\'{"session_id": "trun\''),
            ("trunc-2", "2026-11-28 01:00:05", "'memory.recall.started'", "'not json'"),
        ],
    )
    settings = settings_for(table)
    report = run_once(store, settings, window_at(settings, AT))
    assert report.data_quality["payload_not_json_object"] == 2
    (note,) = [n for n in report.notes if "session id" in n]
    assert note.startswith("2 events carry metadata that is not a JSON object")
    assert "payload_not_json_object" in note


def test_otel_attributes_with_invalid_utf8_count_as_the_parsed_payload_would(store: Store) -> None:
    """otel_logs: the map test for data quality gives what parsing toJSONString(map) gives.

    The preset checks a Map's keys and values for UTF-8 instead of serialising it
    and parsing the text; the counts must equal the parse's, row for row.
    """
    sc = healthy(Scenario())
    table = otel_table()
    write_otel_logs(store, table, sc)
    store.command(
        f"INSERT INTO {table} (Timestamp, ServiceName, SeverityText, LogAttributes, EventName)"
        " SELECT toDateTime64('2026-11-28 01:00:00', 9, 'UTC'), 'svc', 'INFO',"
        " map('session.id', 'ok1', 'query', concat('caf', unhex('E9'))), 'memory.recall.started'"
        " UNION ALL SELECT toDateTime64('2026-11-28 01:00:01', 9, 'UTC'), 'svc', 'INFO',"
        " map(concat('k', unhex('FF')), 'v'), 'tool.call'"
        " UNION ALL SELECT toDateTime64('2026-11-28 01:00:02', 9, 'UTC'), 'svc', 'INFO',"
        " map('quote', '\\\"\\n\\0'), 'tool.call'"
    )
    report = evaluate_table(store, table, AT, OTEL)
    parsed = store.query(
        "SELECT countIf(JSONType(toJSONString(LogAttributes)) != 'Object') AS not_object,"
        f" countIf(NOT isValidUTF8(toJSONString(LogAttributes))) AS bad_utf8 FROM {table}"
    ).first()
    assert (parsed["not_object"], parsed["bad_utf8"]) == (2, 2)
    assert report.data_quality["payload_not_json_object"] == 2
    assert report.data_quality["invalid_utf8"] == 2


def test_a_duplicated_batch_without_event_ids_is_counted_once(store: Store) -> None:
    """otel_logs rows without event.id get a hash of the row: a batch written twice counts once."""
    sc = healthy(Scenario())
    for i in range(3):
        sc.session(f"cold{i}").starts(T0 + H)
    source = otel_table()
    write_otel_logs(store, source, sc)
    table = otel_table()
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(f"CREATE TABLE {table} AS {source}")
    copy = (
        f"INSERT INTO {table} SELECT * REPLACE"
        " (mapFilter((k, v) -> k != 'event.id', LogAttributes) AS LogAttributes)"
        f" FROM {source}"
    )
    store.command(copy)
    once = evaluate_table(store, table, AT, OTEL)
    store.command(copy)  # the exporter retried the whole batch
    twice = evaluate_table(store, table, AT, OTEL)
    assert once.to_json()["checks"] == twice.to_json()["checks"]
    assert once.checks["recall_coverage"].value == 3
    assert twice.data_quality["duplicate_rows"] == once.data_quality["duplicate_rows"] + sum(
        1 for e in sc.events if e.name != "session.started"
    )


def test_events_stamped_ahead_of_the_evaluation_are_judged_once_later(store: Store) -> None:
    """An agent clock running ahead puts events after `at`: unseen now, judged in the window that holds them."""
    sc = healthy(Scenario())
    ahead = AT + 30 * M  # stamped 30 minutes in the future of this run
    sc.session("skewed").starts(ahead)  # no recall: a cold start, once it exists
    table = unique_table()
    sc.write(store, table)
    now = evaluate_table(store, table, AT, {})
    later = evaluate_table(store, table, AT + 4 * H, {})
    after = evaluate_table(store, table, AT + 8 * H, {})
    cold = [r.checks["recall_coverage"].evidence.sessions for r in (now, later, after)]
    assert cold == [(), ("skewed",), None]  # the last window has nothing due: no_data
    # The future event cannot make the source look fresher than it is.
    assert now.checks["telemetry_freshness"].value == (AT - (T0 + 2 * H + M + S)).total_seconds()


def test_a_future_clock_cannot_fake_freshness_against_the_wall_clock(
    store: Store, ch_server: ClickHouseHTTPServer, tmp_path: Path
) -> None:
    """`check` at the wall clock ignores events stamped after it: a silent source stays breached."""
    now = datetime.now(UTC).replace(microsecond=0)
    sc = Scenario()
    sc.session("old").starts(now - 5 * H).recalls(now - 5 * H + S)
    sc.session("ahead").starts(now + 2 * H).recalls(now + 2 * H + S)  # a clock 2h fast
    table = unique_table()
    sc.write(store, table)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[source]\ntable = "{table}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    result = subprocess.run(
        [str(BIN), "check", "--store", ch_server.url(), "--config", str(cfg), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "XDG_DATA_HOME": "/nonexistent-xdg"},
        check=False,
    )
    assert result.returncode == 1, result.stderr
    freshness = json.loads(result.stdout)["checks"]["telemetry_freshness"]
    assert freshness["status"] == "breached"
    assert freshness["value"] >= timedelta(hours=4, minutes=59).total_seconds()
