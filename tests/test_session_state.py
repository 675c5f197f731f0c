"""The session state kept at insert time (checks.state): the raw table's reports, read cheaply.

Every scenario here is written into a fresh joelclaw table that `schema apply
--materialize`'s own statements made (the narrow table, the session state,
their views), then judged twice: on the events, and with `source.state` set.
The whole JSON report must be the same: statuses, values, sample sizes,
evidence, data quality.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from checks.base import Status
from checks.builtin import configured_checks
from checks.kinds import kind_of
from checks.materialize import materialize_statements, plan_for, replacing_of
from checks.scans.plans import Plans
from checks.source_ddl import create_table_sql
from checks.sources import compile_source
from checks.state.layout import BUCKET_MS
from checks.state.read import bounds
from tests import test_engine_properties as engine
from tests import test_properties as windows
from tests.builder import T0, Event, H, M, S, Scenario, settings_for, unique_table
from tests.faults.chserver import ClickHouseHTTPServer
from tests.test_schema import _scenario as every_check
from tests.test_triage import failure_mix
from watchdog.core.errors import ConfigError
from watchdog.core.settings import Plugins, Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.report.page import evaluate_page
from watchdog.runner.once import evaluate_once, run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
EXAMPLES = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Materialized:
    """A joelclaw table with the session state built by `schema apply --materialize`."""

    def __init__(
        self, store: Store, config: dict[str, Any] | None = None, *, plugins: Plugins = PLUGINS
    ) -> None:
        self.store = store
        self.plugins = plugins
        self.table = unique_table()
        self.config = config or {}
        store.command(f"CREATE DATABASE IF NOT EXISTS {self.table.split('.')[0]}")
        store.command(create_table_sql("joelclaw", self.table, ttl=False))
        self.raw = settings_for(self.table, self.config, plugins=plugins)
        self.database = f"state_{uuid.uuid4().hex[:10]}"

    def apply(self) -> Materialized:
        """Run the statements: table, view and backfill of the narrow table and of the state."""
        plan = plan_for(self.raw, ttl=None, database=self.database)
        for statement in materialize_statements(
            self.raw,
            plan,
            self.store.table_columns(self.table),
            configured_checks(self.raw),
            since=T0 - 30 * 24 * H,
            until=T0 + 30 * 24 * H,
            replacing=replacing_of(self.store, self.table),
        ):
            self.store.command(statement.sql, statement.params)
        return self

    @property
    def stateful(self) -> Settings:
        source = {**self.config.get("source", {}), "state": f"{self.database}.session_state"}
        return settings_for(self.table, {**self.config, "source": source}, plugins=self.plugins)

    def write(
        self, events: list[Event], received: datetime = datetime(2026, 12, 1, tzinfo=UTC)
    ) -> None:
        rows = [e.row(received + i * timedelta(milliseconds=1)) for i, e in enumerate(events)]
        self.store.insert(self.table, rows, engine.JOELCLAW_COLUMNS)

    def reports(self, at: datetime, length: timedelta | None = None) -> tuple[dict[str, Any], ...]:
        """The JSON report of the window ending at `at`: from the events, from the state."""
        return tuple(
            run_once(self.store, s, window_at(s, at, length)).to_json()
            for s in (self.raw, self.stateful)
        )


def _same(
    store: Store,
    sc: Scenario,
    at: datetime,
    config: dict[str, Any] | None = None,
    *,
    plugins: Plugins = PLUGINS,
) -> None:
    """The scenario, written after the apply (so through the view), gives one report twice."""
    m = Materialized(store, config, plugins=plugins).apply()
    m.write(sc.events)
    raw, state = m.reports(at)
    assert state == raw


@dataclass(frozen=True)
class Built:
    """`every_check` written after the apply with the default config, and its two reports at AT."""

    m: Materialized
    raw: dict[str, Any]
    state: dict[str, Any]


@pytest.fixture(scope="module")
def built(store: Store) -> Built:
    """One table for the tests that only read it (no test changes it or its `Materialized`)."""
    m = Materialized(store).apply()
    m.write(every_check().events)
    return Built(m, *m.reports(AT))


# --- the reports agree ----------------------------------------------------------------------


def test_state_gives_the_raw_report_on_every_check(built: Built) -> None:
    """Every check, the deviation aggregation and data quality: the same from the state."""
    assert built.state == built.raw


def test_state_gives_the_raw_report_on_the_failure_mix(store: Store) -> None:
    """The triage builder's failures (tests/test_triage.py): the same from the state."""
    _same(store, failure_mix(), AT)


def test_state_gives_the_raw_report_with_session_filters_and_trivial_messages(
    store: Store,
) -> None:
    """Scopes (the source's and a check's own) and payload skip filters read from the state."""
    sc = every_check()
    sc.session("talk").starts(T0 + H).asks(T0 + H + M, kind="greeting").asks(T0 + H + 2 * M)
    sc.session("talk").answers(T0 + H + 3 * M).asks(T0 + 2 * H).recalls(T0 + 2 * H + S)
    sc.event("session.started", T0 + H, "worker", source="worker")
    sc.event("memory.recall.started", T0 + H + S, "worker", source="worker")
    sc.event("session.started", T0 + H, "cron", source="cron")
    mine = {"id": "mine", "kind": "coverage", "required": ["memory.recall.started"]}
    config = {
        "source": {"session_filter": "source != 'cron'"},
        "checks": {
            "custom": [{**mine, "target": 0, "grace": "2m", "session_filter": "source = 'worker'"}]
        },
    }
    _same(store, sc, AT, config)


@pytest.mark.slow
@settings(EXAMPLES, max_examples=2)
@given(plans=windows.session_plans)
def test_state_gives_the_raw_report_in_consecutive_windows(
    store: Store, plans: list[dict[str, Any]]
) -> None:
    """The window properties' sessions, judged window after window from one state."""
    m = Materialized(store, windows.CONFIG).apply()
    m.write(windows._scenario(plans).events)
    for k in range(2, 12, 2):
        raw, state = m.reports(T0 + k * H)
        assert state == raw


def test_the_whole_buckets_and_the_cut_ones_tile_the_lookback() -> None:
    """Whole buckets lie inside [lb, at); the two cut ranges (read from the narrow table by
    time) are the rest, each shorter than a bucket."""
    for lookback in ("7h", "24h"):
        settings = settings_for(
            "t.x", {"window": {"lookback": lookback}, "schedule": {"every": "1h"}}
        )
        for offset_ms in (0, 1, BUCKET_MS - 1, BUCKET_MS, 7 * BUCKET_MS + 123):
            window = window_at(settings, AT + timedelta(milliseconds=offset_ms))
            b, p = bounds(window), window.params()
            lb, at = p["lb_ms"], p["at_ms"]
            assert lb <= b["state_from"] <= b["state_until"] <= at
            assert b["state_from"] % BUCKET_MS == 0 or b["state_from"] == b["state_until"] == at
            assert b["state_until"] % BUCKET_MS == 0 or b["state_until"] == at
            assert b["state_from"] - lb < BUCKET_MS or b["state_from"] == at
            assert at - b["state_until"] < BUCKET_MS or b["state_from"] == b["state_until"]


# --- rows written twice, rows arriving late, rows written before the apply -----------------


def test_a_row_written_twice_is_counted_as_the_source_held_it_when_written(store: Store) -> None:
    """The same rows in a later insert: the same verdicts and the same `duplicate_rows` as the
    unmerged source (the state holds what was written, each session's events once); once
    ClickHouse merges the source's copies away the raw path no longer counts them, the state
    still does, and the verdicts stay the same."""
    sc = every_check()
    m = Materialized(store).apply()
    m.write(sc.events)
    m.write(sc.events[:5], received=datetime(2026, 12, 2, tzinfo=UTC))  # retried, later
    raw_unmerged, state = m.reports(AT)
    assert state == raw_unmerged
    assert state["data_quality"]["duplicate_rows"] > 0
    m.store.command(f"OPTIMIZE TABLE {m.table} FINAL")
    raw_merged, state_after = m.reports(AT)
    assert state_after == state
    assert raw_merged["checks"] == state["checks"]
    assert raw_merged["data_quality"]["duplicate_rows"] < state["data_quality"]["duplicate_rows"]


def test_rows_one_insert_holds_twice_are_one_row_of_a_replacing_source_and_of_the_state(
    store: Store,
) -> None:
    """A ReplacingMergeTree source collapses the copies of one insert as it writes them; the
    view into the narrow table collapses them the same way, so the state counts none."""
    sc = every_check()
    for event in sc.events[:4]:
        sc.duplicate(event)  # copies in the same insert as the original
    m = Materialized(store).apply()
    m.write(sc.events)
    raw, state = m.reports(AT)
    assert state == raw
    assert raw["data_quality"]["duplicate_rows"] == 0


def test_a_late_row_counts_from_the_next_run_on(store: Store) -> None:
    """A row landing after its window was judged updates its session's state on insert: the
    next run sees it, as it would in the events; the run already made is not revisited."""
    sc = Scenario()
    sc.session("late").starts(T0 + H).ends(T0 + 2 * H)
    m = Materialized(store).apply()
    m.write(sc.events)
    before, before_state = m.reports(AT)
    assert before_state == before
    assert before["checks"]["recall_coverage"]["value"] == 1
    late = Scenario()
    late.session("late").recalls(T0 + H + 2 * S)  # written now, two hours after the fact
    m.write(late.events, received=datetime(2026, 12, 2, tzinfo=UTC))
    after, after_state = m.reports(AT)
    assert after_state == after
    assert after["checks"]["recall_coverage"]["value"] == 0


def test_the_backfill_builds_the_state_of_rows_already_written(store: Store) -> None:
    """Rows written before `schema apply --materialize` reach the state through the backfill."""
    m = Materialized(store)
    m.write(every_check().events)
    m.apply()
    raw, state = m.reports(AT)
    assert state == raw


def test_rows_after_at_stay_out_of_the_state_read(store: Store, built: Built) -> None:
    """Events at or after `at`, in the last bucket or later ones, count for neither read."""
    at = AT + timedelta(milliseconds=random.Random(0).randrange(BUCKET_MS))
    sc = every_check()
    for i, later in enumerate((0, 1, BUCKET_MS, 5 * 3600 * 1000)):
        sc.session("good").recalls(at + timedelta(milliseconds=later), fails=True)
        sc.session(f"new{i}").starts(at + timedelta(milliseconds=later))
    grown = Materialized(store).apply()
    grown.write(sc.events)
    _, state = grown.reports(at)
    raw_base = run_once(store, built.m.raw, window_at(built.m.raw, at)).to_json()
    del state["source"], raw_base["source"]
    assert state == raw_base


# --- a state built for other checks ----------------------------------------------------------


def _statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check: c["status"] for check, c in report["checks"].items()}


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"events": {"recall_started": ["memory.recall.started", "recall.begin"]}}, "recall.begin"),
        ({"source": {"session_filter": "source != 'cron'"}}, "source.session_filter changed"),
    ],
    ids=["an event name", "the session filter"],
)
def test_a_state_built_for_other_checks_is_an_error_never_a_quiet_verdict(
    store: Store, built: Built, changed: dict[str, Any], named: str
) -> None:
    """After the config's session rules change, the state's session checks are `error`,
    naming what it does not keep and how to rebuild it; the other checks still judge."""
    state = {"state": f"{built.m.database}.session_state"}
    now = settings_for(built.m.table, {**changed, "source": {**changed.get("source", {}), **state}})
    report = run_once(store, now, window_at(now, AT)).to_json()
    errors = {k: c for k, c in report["checks"].items() if c["status"] == "error"}
    assert "recall_coverage" in errors
    assert set(errors) <= _judged_by_session_scans(now)
    assert "recall_latency_p95" not in errors  # a window check, judged from the events
    summary = errors["recall_coverage"]["summary"]
    assert named in summary and "schema apply --materialize" in summary


def _judged_by_session_scans(settings: Settings) -> set[str]:
    plans = Plans(compile_source(settings.source))
    for spec in configured_checks(settings):
        kind_of(spec).plan(plans, spec)
    return {
        check
        for (scan, _), group in plans.groups.items()
        if scan == "session"
        for check in group.checks
    }


def test_a_state_keeping_more_than_a_run_needs_is_read(store: Store, built: Built) -> None:
    """A check disabled after the apply needs less than the state keeps: the reports agree."""
    disabled = {"checks": {"observe_coverage": {"enabled": False}}}
    source = {"source": {"state": f"{built.m.database}.session_state"}}
    raw, state = (
        run_once(store, s, window_at(s, AT)).to_json()
        for s in (
            settings_for(built.m.table, disabled),
            settings_for(built.m.table, {**disabled, **source}),
        )
    )
    assert state == raw
    assert "error" not in _statuses(state).values()


def _narrow_reader(built: Materialized, config: dict[str, Any] | None = None) -> Settings:
    """The normalized preset on the narrow table beside `built`'s state, reading that state."""
    source = {
        "preset": "normalized",
        "state": f"{built.database}.session_state",
        **(config or {}),
    }
    return settings_for(f"{built.database}.memory_events", {"source": source})


def test_a_state_built_from_a_raw_source_is_read_with_the_normalized_narrow_table(
    store: Store, built: Built
) -> None:
    """A state built with the joelclaw config, read with the normalized preset on its narrow
    table (`source.name` the raw table's): the hours the lookback cuts aggregate the
    dimensions the state keeps from the narrow table's stored ones, and the report is the
    raw table's."""
    narrow = _narrow_reader(built.m, {"name": built.m.table})
    report = run_once(store, narrow, window_at(narrow, AT)).to_json()
    assert "error" not in _statuses(report).values()
    assert report["checks"] == built.raw["checks"]


def test_a_state_read_under_another_source_name_is_an_error_naming_the_key(
    store: Store, built: Built
) -> None:
    """A state holds the sessions of the source it was built for: read under another name
    (the normalized preset on the narrow table, `source.name` unset), the session checks are
    `error` naming `source.name` and the name to set, never `no_data` from an empty read."""
    narrow = _narrow_reader(built.m)
    report = run_once(store, narrow, window_at(narrow, AT)).to_json()
    errors = {k: c for k, c in report["checks"].items() if c["status"] == "error"}
    assert "recall_coverage" in errors
    assert set(errors) <= _judged_by_session_scans(narrow)
    summary = errors["recall_coverage"]["summary"]
    assert "source.name" in summary and built.m.table in summary


def test_state_names_a_table() -> None:
    """source.state is a table name, or the config does not load."""
    with pytest.raises(ConfigError) as err:
        settings_for("t.x", {"source": {"state": "watchdog.session state"}})
    assert "source.state" in str(err.value)


# --- the statements --------------------------------------------------------------------------


def _state_statements(config: dict[str, Any], **plan: Any) -> list[str]:
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    narrow = plan_for(settings, ttl="INTERVAL 180 DAY", **plan)
    statements = materialize_statements(
        settings, narrow, None, configured_checks(settings), since=T0, until=AT
    )
    return [s.sql for s in statements if "session_state" in s.sql.split("\n")[0]]


def test_state_ddl_on_one_node() -> None:
    """An AggregatingMergeTree by (source, bucket, session), fed by a view on the narrow table
    (whose backfill, after both views, fills the state too)."""
    settings = settings_from_mapping({"source": {"preset": "joelclaw"}}, plugins=PLUGINS, env={})
    statements = [
        s.sql
        for s in materialize_statements(
            settings,
            plan_for(settings, ttl="INTERVAL 180 DAY"),
            None,
            configured_checks(settings),
            since=T0,
            until=AT,
        )
    ]
    table, view = (s for s in statements if "session_state" in s)
    assert table.startswith("CREATE TABLE IF NOT EXISTS watchdog.session_state\n(")
    assert "ENGINE = AggregatingMergeTree\n" in table
    assert "ORDER BY (source, bucket, session_id)" in table
    assert (
        "TTL toDateTime(intDiv(bucket, 1000)) + INTERVAL 180 DAY\nCOMMENT 'memory-watchdog" in table
    )
    assert view.startswith(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS watchdog.session_state_mv"
        " TO watchdog.session_state\nAS WITH"
    )
    assert "SELECT 'joelclaw.otel_events' AS source" in view
    assert "FROM watchdog.memory_events" in view
    assert "{" not in view.replace("{}", "")  # no bound parameter in a view's definition
    backfill = statements[-1]
    assert backfill.startswith("INSERT INTO watchdog.memory_events (")
    assert statements.index(view) < statements.index(backfill)


def test_state_ddl_on_a_cluster() -> None:
    """Replicated shards behind a Distributed table sharded by session; each shard's narrow
    rows feed its own state (both sharded by session)."""
    local, distributed, view = _state_statements(
        {"store": {"cluster": "prod", "database": "wd"}, "source": {"preset": "otel_logs"}},
        source_local="otel.otel_logs_local",
    )
    assert (
        "ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/wd/session_state_local'"
        in local
    )
    assert (
        "Distributed('prod', 'wd', 'session_state_local', cityHash64(session_id))\nCOMMENT"
        in distributed
    )
    assert " ON CLUSTER prod TO wd.session_state_local\n" in view
    assert "FROM wd.memory_events_local" in view


# --- a check's own session filter, triaged wherever the report is made ----------------------


@pytest.fixture(scope="module")
def http(store: Store) -> Iterator[ClickHouseHTTPServer]:
    """The test engine over HTTP: `check` and the page open their own store by URL."""
    with ClickHouseHTTPServer(store.client) as server:
        yield server


def test_a_check_with_its_own_session_filter_is_triaged_on_the_page_and_on_the_state(
    store: Store, http: ClickHouseHTTPServer
) -> None:
    """A breached custom coverage check with a session_filter gets its breakdown, never the
    watchdog's own SQL: on `check --format html`, `check --format json`, from the events and
    with `source.state` set."""
    sc = every_check()
    for i in range(3):  # worker sessions that never recall: the custom check's breach
        sc.event("session.started", T0 + H + i * M, f"worker-{i}", source="worker")
    mine = {"id": "mine", "kind": "coverage", "required": ["memory.recall.started"]}
    custom = {**mine, "target": 0, "grace": "2m", "session_filter": "source = 'worker'"}
    m = Materialized(store, {"checks": {"custom": [custom]}}).apply()
    m.write(sc.events)
    store_over_http = {"url": http.url(), "database": f"wd_{uuid.uuid4().hex[:10]}"}
    for read in (m.raw, m.stateful):
        over_http = read.model_copy(update={"store": read.store.model_copy(update=store_over_http)})
        report, page = evaluate_page(over_http, AT, None)
        for made in (report, evaluate_once(over_http, AT, None, triage=True)):
            assert made.checks["mine"].status is Status.BREACHED
            breakdown = made.triage["mine"]
            assert breakdown.error == "" and breakdown.items == 3
            assert breakdown.sessions is not None
            assert [s.session_id for s in breakdown.sessions] == [
                "worker-0",
                "worker-1",
                "worker-2",
            ]
        assert "could not compute" not in page and "scope_mine" not in page
