"""On a real ClickHouse cluster (tests/cluster.py): a Distributed source over 2 and 3 local shards
gives the single table's reports, and every scan aggregates where the data lives.

Each raw preset's table is read through a Distributed table sharded by
session, by event id and by `rand()` (rows spread by a hash of the whole row,
so the copies of one event may lie on different shards); the narrow table
and the session state are built by `schema apply --materialize`'s own
cluster statements, run shard by shard. The whole JSON report (verdicts,
values, sample sizes, evidence, triage, data quality) must be the single
table's, for one window and for a backtest's windows, and `EXPLAIN` of every
query a run sends must show the shards aggregating: never one aggregation on
the initiator above a Union of the shards' bare reads.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from checks.builtin import configured_checks
from checks.materialize import materialize_statements, plan_for, replacing_of
from checks.sources import compile_source
from tests.builder import T0, H, settings_for, unique_table
from tests.cluster import CLUSTERS, distribute, respread, shard_by_shard
from tests.exporter import write_otel_logs, write_otel_traces
from tests.test_otel_layouts import _scenario as otel_scenario
from tests.test_otel_layouts import _spans
from tests.test_schema import _scenario as every_check
from watchdog.core.settings import Plugins, Settings
from watchdog.core.store import QueryResult, Store
from watchdog.runner.backtest import run_windows, windows_ending
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
ENDS = [AT - 2 * H, AT - H, AT]  # a backtest's windows
PRESETS = ("joelclaw", "otel_logs", "otel_traces")
# The tables and their single-table reports are built once, on one worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("cluster")


class Recording(Store):
    """The tests' store, recording every query a run sends (the real engine answers it)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store.client, store.url, query_timeout_s=store.query_timeout_s)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def query(self, sql: str, parameters: Any = None, *, extra_settings: Any = None) -> QueryResult:
        self.sent.append((sql, dict(parameters or {})))
        return super().query(sql, parameters, extra_settings=extra_settings)


@dataclass(frozen=True)
class Source:
    """A raw preset's table holding a world every check judges, and its config."""

    preset: str
    table: str
    config: dict[str, Any]
    plugins: Plugins = PLUGINS

    def settings(self, table: str | None = None) -> Settings:
        return settings_for(table or self.table, self.config, plugins=self.plugins)

    def column(self, store: Store, name: str) -> str:
        """SQL over a raw row: the preset's normalized column `name`, before any array join."""
        compiled = compile_source(self.settings().source, store.table_columns(self.table))
        return compiled.typed[name]


def _written(store: Store, preset: str) -> Source:
    table = unique_table()
    if preset == "joelclaw":
        every_check().write(store, table)
    elif preset == "otel_logs":
        write_otel_logs(store, table, otel_scenario())
    else:
        write_otel_traces(store, table, _spans())
    config = {} if preset == "joelclaw" else {"source": {"preset": preset}}
    return Source(preset, table, config)


def _rows_by(store: Store, source: Source, sharding: str) -> tuple[str, str]:
    """(the sharding key the Distributed table declares, what spreads the rows written)."""
    if sharding == "session":
        by = f"cityHash64({source.column(store, 'session_id')})"
        return by, by
    if source.preset == "otel_traces":  # a span's two events are one row
        return "cityHash64(SpanId)", "cityHash64(SpanId)"
    if sharding == "event":
        by = f"cityHash64({source.column(store, 'event_id')})"
        return by, by
    whole_row = {
        "joelclaw": "cityHash64(id, received_at)",
        "otel_logs": "cityHash64(Timestamp, Body, toString(LogAttributes))",
    }[source.preset]
    return "rand()", whole_row


def distributed(store: Store, source: Source, sharding: str, cluster: str) -> str:
    """`source`'s table read through a Distributed table on `cluster`, its rows spread and its
    sharding key declared as `sharding` says (`_rows_by`): the Distributed table's name."""
    key, spread = _rows_by(store, source, sharding)
    name = f"{source.table}_{sharding}_{cluster}"
    return distribute(store, source.table, cluster, key, spread, name).table


def _json(store: Store, settings: Settings) -> dict[str, Any]:
    document = run_once(store, settings, window_at(settings, AT), triage=True).to_json()
    del document["source"]
    return document


def _backtest(store: Store, settings: Settings) -> list[dict[str, Any]]:
    reports = run_windows(store, settings, windows_ending(settings, ENDS), triage=True)
    return [{k: v for k, v in r.to_json().items() if k != "source"} for r in reports]


@pytest.fixture(scope="module")
def written(store: Store) -> dict[str, tuple[Source, dict[str, Any], list[dict[str, Any]]]]:
    """Each raw preset's table, and its single-table report and backtest."""
    found = {}
    for preset in PRESETS:
        source = _written(store, preset)
        found[preset] = (
            source,
            _json(store, source.settings()),
            _backtest(store, source.settings()),
        )
    return found


# --- the reports: a Distributed source gives the single table's ---------------------------


# Every sharding on 2 shards; on 3, `rand()`, which splits a session's events (and an event's
# copies) the most.
LAYOUTS = [(sharding, "two") for sharding in ("session", "event", "rand")] + [("rand", "three")]


def layouts(preset: str) -> list[tuple[str, str]]:
    """LAYOUTS but those giving a preset the same table twice: spans sharded by event id are
    spread by SpanId, as by `rand()` (`_rows_by`), whose case judges a backtest too."""
    if preset == "otel_traces":
        return [layout for layout in LAYOUTS if layout != ("event", "two")]
    return LAYOUTS


CASES = [(p, s, c) for p in PRESETS for s, c in layouts(p)]


@dataclass
class Run:
    """One window's run (with triage) on a Distributed table, made once for the tests that
    judge it: its report, and the queries it sent (for EXPLAIN)."""

    settings: Settings
    json: dict[str, Any]
    sent: list[tuple[str, dict[str, Any]]]


def _run(store: Store, settings: Settings) -> Run:
    recording = Recording(store)
    return Run(settings, _json(recording, settings), recording.sent)


@pytest.fixture(scope="module")
def runs(store: Store, written: dict[str, Any]) -> Any:
    """`runs(preset, sharding, cluster)`: the raw table read through a Distributed table, and
    its run, made on first use."""
    made: dict[tuple[str, str, str], Run] = {}

    def run(preset: str, sharding: str, cluster: str) -> Run:
        if (preset, sharding, cluster) not in made:
            source, _, _ = written[preset]
            table = distributed(store, source, sharding, cluster)
            made[preset, sharding, cluster] = _run(store, source.settings(table))
        return made[preset, sharding, cluster]

    return run


@pytest.mark.parametrize(("preset", "sharding", "cluster"), CASES, ids=["-".join(c) for c in CASES])
def test_a_distributed_raw_source_gives_the_single_tables_report(
    store: Store, written: dict[str, Any], runs: Any, preset: str, sharding: str, cluster: str
) -> None:
    """Every check, its evidence and triage, one window (and, rows spread by `rand()`, a
    backtest's windows): as on one table."""
    _, single, backtest = written[preset]
    run = runs(preset, sharding, cluster)
    assert run.json == single
    if sharding == "rand":
        assert _backtest(store, run.settings) == backtest


@dataclass
class Materialized:
    """The narrow table and the session state on a cluster, from the raw joelclaw table."""

    database: str
    raw: Source
    runs: dict[str, Run] = field(default_factory=dict)  # "state", "narrow": made on first use

    def run(self, store: Store, read: str) -> Run:
        """The run (with triage) of one window reading the state or the narrow table."""
        if read not in self.runs:
            self.runs[read] = _run(store, self.state if read == "state" else self.narrow)
        return self.runs[read]

    @property
    def state(self) -> Settings:
        source = {**self.raw.config.get("source", {}), "state": f"{self.database}.session_state"}
        return settings_for(
            self.raw.table, {**self.raw.config, "source": source}, plugins=self.raw.plugins
        )

    @property
    def narrow(self) -> Settings:
        return settings_for(f"{self.database}.memory_events", {"source": {"preset": "normalized"}})


def _materialized(store: Store, source: Source, cluster: str) -> Materialized:
    """`schema apply --materialize` with `store.cluster` set, its statements run shard by shard
    (no Keeper here for ON CLUSTER), then each table read through its shards' own rows."""
    database = f"cl_{uuid.uuid4().hex[:10]}"
    settings = settings_for(
        source.table, {**source.config, "store": {"cluster": cluster}}, plugins=source.plugins
    )
    statements = materialize_statements(
        settings,
        plan_for(settings, ttl=None, database=database),
        store.table_columns(source.table),
        configured_checks(settings),
        since=T0 - 30 * 24 * H,
        until=T0 + 30 * 24 * H,
        replacing=replacing_of(store, source.table),
    )
    assert any(" ON CLUSTER " in s.sql for s in statements)
    shard_by_shard(store, [(s.sql, dict(s.params)) for s in statements])
    for table in ("memory_events", "session_state"):
        local = f"{database}.{table}_local"
        respread(store, f"{database}.{table}", local, cluster, "cityHash64(session_id)")
    return Materialized(database, source)


@pytest.fixture(scope="module")
def materialized_on(store: Store, written: dict[str, Any]) -> Any:
    """`materialized_on(cluster)`: the narrow table and the state on it, made on first use."""
    made: dict[str, Materialized] = {}

    def on(cluster: str) -> Materialized:
        if cluster not in made:
            made[cluster] = _materialized(store, written["joelclaw"][0], cluster)
        return made[cluster]

    return on


@pytest.fixture(params=list(CLUSTERS))
def materialized(materialized_on: Any, request: Any) -> Materialized:
    return materialized_on(request.param)


def test_the_state_on_a_cluster_gives_the_raw_report(
    store: Store, written: dict[str, Any], materialized: Materialized
) -> None:
    """The session state sharded by session, each shard judging its own sessions: the raw
    single table's whole report, one window and a backtest's."""
    _, single, backtest = written["joelclaw"]
    assert materialized.run(store, "state").json == single
    assert _backtest(store, materialized.state) == backtest


def test_the_narrow_table_on_a_cluster_gives_the_raw_verdicts(
    store: Store, written: dict[str, Any], materialized: Materialized
) -> None:
    """The narrow table read with the normalized preset, sharded by session: the raw table's
    verdicts, evidence (the error classes the narrow table stored), deviations and data quality."""
    _, single, _ = written["joelclaw"]
    found = materialized.run(store, "narrow").json
    for key in ("status", "checks", "deviations", "data_quality"):
        assert found[key] == single[key], key


# --- EXPLAIN: the shards aggregate -----------------------------------------------------------


@dataclass
class Step:
    name: str
    children: list[Step]

    def walk(self) -> list[Step]:
        return [self, *(s for c in self.children for s in c.walk())]

    def shape(self) -> tuple[Any, ...]:
        return (self.name, tuple(c.shape() for c in self.children))


def plan(store: Store, sql: str, params: dict[str, Any]) -> Step:
    """The query plan of `sql` as a tree of step names (`EXPLAIN PLAN`)."""
    rows = store.query("EXPLAIN PLAN header = 0, description = 0, actions = 0 " + sql, params).rows
    root = Step("", [])
    stack: list[tuple[int, Step]] = [(-1, root)]
    for (line,) in rows:
        name = str(line).lstrip(" │├└─")
        if not name or " " in name.strip():
            continue  # the Output line, blank lines
        depth = len(str(line)) - len(name)
        step = Step(name.strip(), [])
        while stack[-1][0] >= depth:
            stack.pop()
        stack[-1][1].children.append(step)
        stack.append((depth, step))
    return root


def shards_merged_bare(root: Step) -> list[str]:
    """The measured failure: the shards' reads merged (a Union of one plan per shard) before
    any aggregation. Each such Union is named by its shards' plan."""
    found = []
    for step in root.walk():
        if step.name != "Union" or len(step.children) < 2:
            continue
        shapes = {child.shape() for child in step.children}
        if len(shapes) != 1:
            continue  # a UNION ALL of different reads (the state's hours and cut hours)
        for child in step.children:
            names = [s.name for s in child.walk()]
            if any(n.startswith("Read") for n in names) and not any(
                n in ("Aggregating", "MergingAggregated") for n in names
            ):
                found.append(" > ".join(names))
    return found


def _scans(recording: Recording) -> list[tuple[str, dict[str, Any]]]:
    """The queries a run sent but the catalogue lookups, the plan-only probe (LIMIT 0) and the
    reads of the SLO ledger (the watchdog's own table, there once any test of this process's
    store has judged a bucket)."""
    return [
        (sql, params)
        for sql, params in recording.sent
        if "system." not in sql and "LIMIT 0" not in sql and ".slo_buckets " not in sql
    ]


def _explained(store: Store, run: Run, backtest: bool = True) -> list[tuple[str, Step]]:
    """The plan of every query `run` sent and, with `backtest`, a backtest (no triage) sends."""
    recording = Recording(store)
    recording.sent = list(run.sent)
    if backtest:
        run_windows(recording, run.settings, windows_ending(run.settings, ENDS))
    return [(sql, plan(store, sql, params)) for sql, params in _scans(recording)]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_scan_on_a_distributed_source_aggregates_on_the_shards(
    store: Store, runs: Any, preset: str
) -> None:
    """EXPLAIN of every query a run and a backtest send, rows spread by `rand()`: each Union of
    the shards has an aggregation in every shard's plan (MergingAggregated above it on the
    initiator)."""
    explained = _explained(store, runs(preset, "rand", "two"))
    assert len(explained) >= 5
    for sql, root in explained:
        assert not shards_merged_bare(root), sql.strip().splitlines()[0]
        names = [s.name for s in root.walk()]
        assert "Union" in names and "MergingAggregated" in names, sql.strip().splitlines()[0]


@pytest.mark.parametrize("sharding", ["session", "event"])
def test_a_raw_sources_sharding_key_changes_no_query(
    store: Store, runs: Any, sharding: str
) -> None:
    """On a raw preset's Distributed table, sharded by session or by event id, a run sends the
    queries it sends on one sharded by `rand()` (whose plans the EXPLAIN test reads): only a
    narrow table sharded by `cityHash64(session_id)` runs its session scan whole on the
    shards (checks/sources.py, open_source)."""
    keyed, spread = runs("joelclaw", sharding, "two"), runs("joelclaw", "rand", "two")
    assert _sent_on(keyed) == _sent_on(spread)


def _sent_on(run: Run) -> list[str]:
    """The queries and parameters `run` sent, its Distributed table's name as `T`."""
    name = run.settings.source.table_name.rpartition(".")[2]
    return [repr(sent).replace(name, "T") for sent in run.sent]


def test_on_a_session_sharded_state_the_initiator_merges_per_check_rows(
    store: Store, materialized_on: Any
) -> None:
    """The session scan on the state (and on the narrow table) runs whole on each shard: above
    the shards' Union the initiator only merges their per-check totals, and every other scan
    aggregates on the shards. On 2 shards: each shard's plan is the one query's, whatever the
    number of shards (3 only adds a child to the Union)."""
    materialized = materialized_on("two")
    # A backtest on the state judges its windows one by one, with the same queries: its
    # backtest is the narrow table's pieces.
    for read, backtest in (("state", False), ("narrow", True)):
        explained = _explained(store, materialized.run(store, read), backtest)
        sessions = [root for sql, root in explained if "AS dq_duplicate_rows" in sql]
        assert sessions
        for root in sessions:
            top = [s.name for s in root.walk()][: root.walk().index(_union(root)) + 1]
            assert top[-2:] == ["MergingAggregated", "Union"], top
            assert "Aggregating" not in top  # nothing grouped on the initiator
            for shard in _union(root).children:
                assert [s.name for s in shard.walk()].count("Aggregating") >= 2
        for sql, root in explained:
            assert not shards_merged_bare(root), sql.strip().splitlines()[0]


def _union(root: Step) -> Step:
    return next(s for s in root.walk() if s.name == "Union")


def test_the_failure_shape_is_recognised(store: Store, written: dict[str, Any]) -> None:
    """A grouping over a subquery of the Distributed table (the shape measured before) is the
    failure the EXPLAIN tests look for, and grouping over the table itself is not."""
    source, _, _ = written["joelclaw"]
    dist = distribute(store, source.table, "two", "cityHash64(id)", name=f"{source.table}_shape")
    over_subquery = f"SELECT k, count() FROM (SELECT action AS k FROM {dist.table}) GROUP BY k"
    assert shards_merged_bare(plan(store, over_subquery, {}))
    direct = f"SELECT action AS k, count() FROM {dist.table} GROUP BY k"
    assert not shards_merged_bare(plan(store, direct, {}))
