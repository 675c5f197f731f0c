"""`schema apply`: the narrow table's DDL, and the same verdicts when the watchdog reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from checks.base import Report
from checks.builtin import configured_checks
from checks.kinds import payload_names
from checks.materialize import (
    NarrowPlan,
    Statement,
    materialize_statements,
    plan_for,
    source_ttl,
)
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from watchdog.cli.schema import state_statements
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
SINCE, UNTIL = T0 - 24 * H, AT + H


def _statements(config: dict[str, Any], **plan: Any) -> list[Statement]:
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    narrow = plan_for(settings, ttl=plan.pop("ttl", "INTERVAL 180 DAY"), **plan)
    statements = materialize_statements(
        settings, narrow, None, configured_checks(settings), since=SINCE, until=UNTIL
    )
    # The narrow table's; the session state's are tested in test_session_state.
    return [s for s in statements if "session_state" not in s.sql]


def test_single_node_ddl() -> None:
    """One MergeTree ordered by (session_id, ts), partitioned by day, with the source's TTL."""
    database, table, view, backfill = _statements({"source": {"preset": "joelclaw"}})
    assert database.sql == "CREATE DATABASE IF NOT EXISTS watchdog"
    assert table.sql.startswith("CREATE TABLE IF NOT EXISTS watchdog.memory_events\n(")
    assert "ENGINE = MergeTree\nPARTITION BY toDate(ts)\nORDER BY (ts, session_id)" in table.sql
    assert table.sql.endswith("TTL toDateTime(ts) + INTERVAL 180 DAY")
    assert view.sql.startswith(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS watchdog.memory_events_mv"
        " TO watchdog.memory_events\nAS SELECT"
    )
    assert "FROM joelclaw.otel_events" in view.sql
    assert "ON CLUSTER" not in "".join(s.sql for s in (database, table, view, backfill))
    assert backfill.sql.startswith("INSERT INTO watchdog.memory_events (event_id, ts, session_id,")
    assert "{backfill_from_ms:Int64}" in backfill.sql
    assert "{backfill_until_ms:Int64}" in backfill.sql
    assert backfill.params == {
        "backfill_from_ms": int(SINCE.timestamp() * 1000),
        "backfill_until_ms": int(UNTIL.timestamp() * 1000),
    }


def test_cluster_ddl() -> None:
    """ON CLUSTER everywhere; replicated shards behind a Distributed table sharded by session."""
    statements = _statements(
        {"store": {"cluster": "prod", "database": "wd"}, "source": {"preset": "otel_logs"}},
        source_local="otel.otel_logs_local",
    )
    database, local, distributed, view, backfill = statements
    assert database.sql == "CREATE DATABASE IF NOT EXISTS wd ON CLUSTER prod"
    assert local.sql.startswith("CREATE TABLE IF NOT EXISTS wd.memory_events_local ON CLUSTER prod")
    assert (
        "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/wd/memory_events_local',"
        " '{replica}')\nPARTITION BY toDate(ts)\nORDER BY (ts, session_id)" in local.sql
    )
    assert distributed.sql == (
        "CREATE TABLE IF NOT EXISTS wd.memory_events ON CLUSTER prod AS wd.memory_events_local\n"
        "ENGINE = Distributed('prod', 'wd', 'memory_events_local', cityHash64(session_id))"
    )
    # The view hangs on the shard-local source and writes through the Distributed table.
    assert view.sql.startswith(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS wd.memory_events_mv ON CLUSTER prod"
        " TO wd.memory_events\nAS SELECT"
    )
    assert "FROM otel.otel_logs_local" in view.sql
    # The one-off backfill reads every shard of the source and writes through Distributed too.
    assert backfill.sql.startswith("INSERT INTO wd.memory_events (")
    assert "FROM otel.otel_logs AS " in backfill.sql


def test_no_ttl_when_the_source_has_none() -> None:
    """A source without TTL gives a narrow table without TTL."""
    _, table, _, _ = _statements({"source": {"preset": "joelclaw"}}, ttl=None)
    assert "TTL" not in table.sql


def test_source_ttl_is_read_from_engine_full() -> None:
    """The TTL interval is taken from the source's engine definition."""
    engine = (
        "ReplacingMergeTree(received_at) PARTITION BY toYYYYMM(timestamp) ORDER BY (id, timestamp)"
        " TTL toDateTime(timestamp) + toIntervalDay(180) SETTINGS index_granularity = 8192"
    )
    assert source_ttl(engine) == "INTERVAL 180 DAY"
    assert source_ttl("MergeTree ORDER BY ts SETTINGS index_granularity = 8192") is None


def test_payload_kept_only_where_a_check_reads_it() -> None:
    """Gate decisions, deviations and human messages keep their payload; the view escapes names."""
    settings = settings_from_mapping(
        {"events": {"gate_decision": ["gate's decision"]}}, plugins=PLUGINS, env={}
    )
    assert payload_names(configured_checks(settings)) == [
        "anamnese.agent_deviation",
        "gate's decision",
        "gateway.message.received",
        "message.received",
    ]
    _, _, view, _ = _statements({"events": {"gate_decision": ["gate's decision"]}})
    assert "'gate\\'s decision'" in view.sql
    assert "name IN ('anamnese.agent_deviation', 'gate\\'s decision'," in view.sql


def test_state_statements_create_the_watchdog_tables() -> None:
    """Without --materialize: the watchdog's own database and state tables."""
    statements = state_statements(settings_from_mapping({}, plugins=PLUGINS, env={}))
    assert statements[0].sql == "CREATE DATABASE IF NOT EXISTS `watchdog`"
    assert all(s.sql.startswith("CREATE TABLE IF NOT EXISTS `watchdog`.") for s in statements[1:])


def test_render_binds_parameters_for_clickhouse_client() -> None:
    """The printed script sets the backfill's parameters before the statement."""
    backfill = _statements({"source": {"preset": "joelclaw"}})[-1]
    text = backfill.render()
    assert f"SET param_backfill_from_ms = {int(SINCE.timestamp() * 1000)};" in text
    assert text.endswith(";")


# --- on the embedded engine ------------------------------------------------------------------


def _scenario() -> Scenario:
    """Every check with something to judge: cold starts, losses, failures, gates, deviations."""
    sc = Scenario()
    good = sc.session("good").starts(T0 + H).recalls(T0 + H + S, result_count=2)
    good.injects(T0 + H + 2 * S).compacts(T0 + H + 10 * M).observes(T0 + H + 10 * M + S)
    good.ends(T0 + 2 * H).observes(T0 + 2 * H + M)
    sc.session("cold").starts(T0 + H).recalls(T0 + H + 20 * M, latency_ms=4200)
    slow = sc.session("slow").starts(T0 + 90 * M).recalls(T0 + 90 * M + S, latency_ms=3500)
    slow.recalls(T0 + 100 * M, fails=True).recalls(T0 + 101 * M, fails=True)
    slow.compacts(T0 + 2 * H).observes(T0 + 2 * H + S, lost=True)
    slow.observes(T0 + 2 * H + M, fails=True).ends(T0 + 3 * H)
    uninjected = sc.session("uninjected").starts(T0 + 2 * H)
    uninjected.recalls(T0 + 2 * H + S, result_count=5)
    for i in range(6):
        verdict = "discard" if i % 2 else "allow"
        uninjected.emits("memory.gate.decision", T0 + 2 * H + i * M, meta={"verdict": verdict})
    sc.session("good").emits("tool.call", T0 + H + 3 * M)  # the first deviation cites it
    sc.session("dev").starts(T0 + 2 * H).recalls(T0 + 2 * H + S)
    sc.session("dev").deviates(
        T0 + 2 * H + M, {"agente": "po", "tipo": "laco", "evidenceEventIds": [sc.events[-1].id]}
    )
    sc.session("dev").deviates(
        T0 + 2 * H + 2 * M, {"agente": "qa", "tipo": "laco", "evidenceEventIds": ["ev-missing"]}
    )
    sc.session("dev").deviates(T0 + 2 * H + 3 * M, {"agente": "po", "tipo": "laco", "nota": "x"})
    sc.session("dev").emits("memory.observe.requested", T0 + 2 * H + 4 * M, metadata_json="[1]")
    sc.duplicate(sc.events[3])
    sc.event("gateway.heartbeat", T0 + 3 * H, None, session_column="gateway")
    return sc


def _verdicts(report: Report) -> dict[str, Any]:
    """The report without its source name (which names the table read) and its notes.

    The notes say what the raw preset did with rows it read (metadata it could not
    parse): the narrow table holds what materializing made of those rows, and its
    `data_quality` (compared) counts them all the same.
    """
    document = report.to_json()
    del document["source"]
    document.pop("notes", None)
    return document


@pytest.fixture(scope="module")
def applied(store: Store) -> tuple[str, NarrowPlan]:
    """A raw joelclaw table with the scenario, and its narrow table built by the DDL."""
    raw = unique_table()
    _scenario().write(store, raw)
    settings = settings_for(raw)
    plan = plan_for(settings, ttl=None, database=f"narrow_{uuid.uuid4().hex[:10]}")
    present = store.table_columns(raw)
    for statement in materialize_statements(
        settings, plan, present, configured_checks(settings), since=SINCE, until=UNTIL
    ):
        store.command(statement.sql, statement.params)
    return raw, plan


def test_backfill_copies_every_row(store: Store, applied: tuple[str, NarrowPlan]) -> None:
    """The backfill copies each source row (duplicates included) into the narrow table."""
    raw, plan = applied
    raw_rows = store.query(f"SELECT count() FROM {raw}").rows[0][0]
    narrow_rows = store.query(f"SELECT count() FROM {plan.table}").rows[0][0]
    assert narrow_rows == raw_rows > 0


def test_normalized_preset_gives_the_same_verdicts(
    store: Store, applied: tuple[str, NarrowPlan]
) -> None:
    """Every check, the deviation aggregation and data quality agree on raw and narrow tables."""
    raw, plan = applied
    raw_settings = settings_for(raw)
    narrow_settings = settings_for(plan.table, {"source": {"preset": "normalized"}})
    raw_report = run_once(store, raw_settings, window_at(raw_settings, AT))
    narrow_report = run_once(store, narrow_settings, window_at(narrow_settings, AT))
    expected = _verdicts(raw_report)
    assert expected["status"] == "breached"
    assert {c["status"] for c in expected["checks"].values()} >= {"ok", "breached"}
    assert _verdicts(narrow_report) == expected


def test_view_copies_new_rows(store: Store, applied: tuple[str, NarrowPlan]) -> None:
    """Rows inserted into the source after apply reach the narrow table through the view."""
    raw, plan = applied
    before = store.query(f"SELECT count() FROM {plan.table}").rows[0][0]
    later = Scenario()
    later._ids = iter(range(10_000, 10_010))  # type: ignore[assignment]
    later.session("late").starts(AT + M).recalls(AT + 2 * M)
    later.write(store, raw)
    row = store.query(
        f"SELECT count() AS n, countIf(session_id = 'late') AS late FROM {plan.table}"
    ).first()
    assert row["n"] == before + len(later.events)
    assert row["late"] == len(later.events)


# --- the command -----------------------------------------------------------------------------

BIN = Path(sys.executable).parent / "memory-watchdog"
SETUP = """
import sys
from tests.builder import H, S, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("s1").starts(T0 + H).recalls(T0 + H + S)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@pytest.mark.slow
def test_schema_apply_prints_then_applies(tmp_path: Path) -> None:
    """Without --yes it only prints; with --yes the narrow table is built and checkable."""
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=Path(__file__).parents[1])
    printed = _cli("schema", "apply", "--materialize", "--store", url)
    assert printed.returncode == 0, printed.stderr
    assert "CREATE MATERIALIZED VIEW IF NOT EXISTS watchdog.memory_events_mv" in printed.stdout
    assert printed.stdout.rstrip().endswith("run again with --yes to execute these statements.")
    applied = _cli("schema", "apply", "--materialize", "--since", "1000d", "--yes", "--store", url)
    assert applied.returncode == 0, applied.stderr
    assert "-- Applied " in applied.stdout
    config = tmp_path / "normalized.toml"
    config.write_text('[source]\npreset = "normalized"\ntable = "watchdog.memory_events"\n')
    checked = _cli(
        "check",
        "--store",
        url,
        "--config",
        str(config),
        "--at",
        "2026-11-28T04:00:00Z",
        "--format",
        "json",
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["checks"]["recall_coverage"]["sample_size"] == 1


def test_queries_ask_for_global_in_subqueries(store: Store) -> None:
    """On a Distributed source the evidence lookup's IN subquery must run once, globally.

    ClickHouse refuses a non-GLOBAL IN over a distributed table by default
    (`distributed_product_mode = 'deny'`); every query the store sends sets it
    to `global`, and the engine sees that setting.
    """
    row = store.query("SELECT getSetting('distributed_product_mode') AS mode").first()
    assert row["mode"] == "global"
