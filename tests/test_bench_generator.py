"""The benchmark's telemetry generator: exact counts, a realistic mix, inside the lookback."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from benchmarks.generate import DEFAULT_AT, generate
from watchdog.core.store import Store

EVENTS = 10_000
MEMORY_PREFIXES = ("memory.", "observe.", "session.", "compaction.", "anamnese.")


@pytest.fixture(scope="module")
def generated(store: Store) -> dict[str, str]:
    """One small table per preset, in a database of this module's own."""
    database = f"bench_{uuid.uuid4().hex[:10]}"
    tables = {}
    for preset in ("joelclaw", "otel_logs"):
        table = f"{database}.{preset}"
        generate(store, preset, table, EVENTS)
        tables[preset] = table
    return tables


def _names(store: Store, table: str, preset: str) -> dict[str, int]:
    column = "action" if preset == "joelclaw" else "EventName"
    rows = store.query(f"SELECT {column}, count() FROM {table} GROUP BY {column}").rows
    return {str(name): int(n) for name, n in rows}


@pytest.mark.parametrize("preset", ["joelclaw", "otel_logs"])
def test_row_count_is_exact_with_duplicates(
    store: Store, generated: dict[str, str], preset: str
) -> None:
    """The table holds exactly the requested rows, 0.2% of them a second copy of an event."""
    table = generated[preset]
    key = "id" if preset == "joelclaw" else "LogAttributes['event.id']"
    # otel_logs heartbeats carry no event.id: each is an event of its own.
    row = store.query(
        f"SELECT count() AS n, uniqExactIf({key}, {key} != '') + countIf({key} = '') AS events"
        f" FROM {table}"
    ).first()
    assert row["n"] == EVENTS
    assert row["events"] == EVENTS - EVENTS // 500


@pytest.mark.parametrize("preset", ["joelclaw", "otel_logs"])
def test_name_mix_is_mostly_tool_traffic(
    store: Store, generated: dict[str, str], preset: str
) -> None:
    """About one event in five is a memory or session event; tool calls dominate the rest."""
    names = _names(store, generated[preset], preset)
    memory = sum(n for name, n in names.items() if name.startswith(MEMORY_PREFIXES))
    assert 0.12 * EVENTS < memory < 0.25 * EVENTS
    assert names["tool.call"] + names["tool.result"] > 0.3 * EVENTS
    for role in (
        "memory.recall.started",
        "memory.recall.completed",
        "memory.recall.failed",
        "memory.recall.injected",
        "memory.observe.requested",
        "observe.store.completed",
        "compaction.before",
        "memory.gate.decision",
        "session.ended",
    ):
        assert names.get(role, 0) > 0, role
    # About 100 sessions, one recall start per session at the start and one mid-session.
    assert 180 <= names["memory.recall.started"] <= 200


@pytest.mark.parametrize("preset", ["joelclaw", "otel_logs"])
def test_events_lie_inside_the_lookback(
    store: Store, generated: dict[str, str], preset: str
) -> None:
    """Every event is in [at - 24h, at): the checks' read range holds the whole table."""
    ts = "timestamp" if preset == "joelclaw" else "Timestamp"
    row = store.query(f"SELECT min({ts}) AS lo, max({ts}) AS hi FROM {generated[preset]}").first()
    low, high = (
        row["lo"].replace(tzinfo=DEFAULT_AT.tzinfo),
        row["hi"].replace(tzinfo=DEFAULT_AT.tzinfo),
    )
    assert DEFAULT_AT - timedelta(hours=24) <= low
    assert high < DEFAULT_AT


def test_joelclaw_metadata_carries_session_and_query(
    store: Store, generated: dict[str, str]
) -> None:
    """Metadata is JSON with the session id (or sessionId for workers) and recall queries."""
    row = store.query(
        "SELECT"
        " countIf(NOT isValidJSON(metadata_json)) AS invalid,"
        " uniqExact(JSONExtractString(metadata_json, 'session_id')) AS sessions,"
        " countIf(action LIKE 'observe.store.%' AND JSONExtractString(metadata_json, 'sessionId') = '')"
        "   AS workers_without_session,"
        " avgIf(length(JSONExtractString(metadata_json, 'query')), action = 'memory.recall.started')"
        "   AS query_length,"
        " avg(length(metadata_json)) AS metadata_length"
        f" FROM {generated['joelclaw']}"
    ).first()
    assert row["invalid"] == 0
    assert 100 <= row["sessions"] <= 101  # 100 sessions, plus '' for sessionless heartbeats
    assert row["workers_without_session"] == 0
    assert 40 < row["query_length"] < 200
    assert 120 < row["metadata_length"] < 400


def test_the_lean_mix_breaches_every_kind_that_window_data_can(
    store: Store, store_url: str
) -> None:
    """The bench's lean case is what users hit when things go wrong: every built-in check
    breaches but freshness (whose breach is a window without recent events)."""
    from benchmarks.run import settings_for
    from watchdog.runner.once import run_once, window_at

    table = f"bench_{uuid.uuid4().hex[:10]}.joelclaw_lean"
    generate(store, "joelclaw", table, 1_000_000, mix="lean")
    settings = settings_for(store_url, "joelclaw", table)
    checks = run_once(store, settings, window_at(settings, DEFAULT_AT)).to_json()["checks"]
    statuses = {check_id: check["status"] for check_id, check in checks.items()}
    assert statuses.pop("telemetry_freshness") == "ok"
    assert len(statuses) == 11
    assert set(statuses.values()) == {"breached"}, statuses
