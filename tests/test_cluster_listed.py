"""On a real ClickHouse cluster (tests/cluster.py): the evidence's listed events, looked up by id
in one query per evaluation (checks/listed.py), are the single table's, and the lookup filters and
aggregates on the shards.

Each raw preset's table holds a world where every check that lists events
lists some (failed observes and recalls with their errors, slow recalls, an
unanswered message, deviations), one failure written twice, among healthy
sessions. Read through a Distributed table (2 and 3 shards; rows spread by
session, by event id and by `rand()`, which may put an event's two copies on
two shards), every listed event's session, name, latency and error class
(`event_details`) must be the single table's, for one window and a
backtest's. `EXPLAIN` of the lookup must show the id filter in every shard's
plan and each shard grouping its own rows by event id, the initiator only
merging their rows (`MergingAggregated` above the Union).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.builder import T0, H, M, S, Scenario, unique_table
from tests.cluster import CLUSTERS
from tests.exporter import Span, write_otel_logs, write_otel_traces
from tests.test_cluster import (
    AT,
    CASES,
    ENDS,
    PRESETS,
    Recording,
    Source,
    Step,
    distributed,
    plan,
    shards_merged_bare,
)
from watchdog.core.store import Store
from watchdog.runner.backtest import run_windows, windows_ending
from watchdog.runner.once import run_once, window_at

pytestmark = pytest.mark.xdist_group("cluster")

HEALTHY = 30  # sessions with nothing to list: the lookup reads few of many rows
# Every check listing events in the world below lists some (deviations, messages and the
# observe's request are log events: the traces world has recalls and observes only).
LISTING = {
    "joelclaw": {
        "observe_failure_rate",
        "recall_failure_rate",
        "recall_latency_p95",
        "recall_before_response",
        "agent_deviation_contract",
        "agent_deviation_evidence",
    },
    "otel_traces": {"observe_failure_rate", "recall_failure_rate", "recall_latency_p95"},
}
LISTING["otel_logs"] = LISTING["joelclaw"]
CHECKS = {check: {"min_samples": 0} for check in LISTING["joelclaw"]}
# The error class each preset's failed observe carries, as the triage normalises it.
OBSERVE_ERROR = {
    "joelclaw": "qdrant timeout after <n>",
    "otel_logs": "qdrant timeout after <n>",
    "otel_traces": "QdrantTimeout",
}


def _fails(session: Any, name: str, at: Any, error: str) -> None:
    """A failure carrying its error: joelclaw's `error` column, an `error` log attribute."""
    session.emits(name, at, success=0, error=error, meta={"error": error})


def _events() -> Scenario:
    """Healthy sessions, and every kind of listed event, one failure written twice."""
    sc = Scenario()
    for i in range(HEALTHY):
        ok = sc.session(f"ok{i}").starts(T0 + H + i * M).asks(T0 + H + i * M + S)
        ok.recalls(T0 + H + i * M + 2 * S).answers(T0 + H + i * M + 5 * S)
        ok.emits("memory.observe.requested", T0 + H + i * M + 6 * S)
        ok.emits("observe.store.completed", T0 + H + i * M + 7 * S)
    slow = sc.session("slow").starts(T0 + 2 * H).recalls(T0 + 2 * H + S, latency_ms=4200)
    slow.recalls(T0 + 2 * H + M, latency_ms=3500).recalls(T0 + 2 * H + 2 * M, latency_ms=5100)
    slow.emits("memory.observe.requested", T0 + 2 * H + 3 * M)
    _fails(slow, "observe.store.failed", T0 + 2 * H + 3 * M + S, "qdrant timeout after 30s")
    sc.duplicate(sc.events[-1])  # a retry from the agent's outbox: the same id twice
    broken = sc.session("broken").starts(T0 + 2 * H).emits("memory.recall.started", T0 + 2 * H)
    _fails(broken, "memory.recall.failed", T0 + 2 * H + S, "connection refused")
    broken.emits("memory.observe.requested", T0 + 2 * H + M)
    _fails(broken, "observe.store.failed", T0 + 2 * H + M + S, "qdrant timeout after 12s")
    rushed = sc.session("rushed").starts(T0 + 2 * H).asks(T0 + 2 * H + S, id="unanswered")
    rushed.answers(T0 + 2 * H + 10 * S).recalls(T0 + 2 * H + M)
    dev = sc.session("dev").starts(T0 + 2 * H).recalls(T0 + 2 * H + S)
    cited = {"agente": "po", "tipo": "laco", "sessionId": "dev"}
    dev.deviates(T0 + 2 * H + M, {**cited, "evidenceEventIds": ["unanswered"]})
    dev.deviates(T0 + 2 * H + 2 * M, {**cited, "evidenceEventIds": ["ev-missing"]})
    dev.deviates(T0 + 2 * H + 3 * M, {"agente": "qa", "tipo": "laco", "sessionId": "dev"})
    return sc


def _spans() -> list[Span]:
    """Healthy recall and observe spans, slow ones, and failed ones with their error types."""
    spans = [Span("memory.recall", T0 + H + i * M, 400.0 + i, f"ok{i}") for i in range(HEALTHY)]
    spans += [Span("memory.observe", T0 + H + i * M + S, 90.0, f"ok{i}") for i in range(HEALTHY)]
    spans += [Span("memory.recall", T0 + 2 * H + i * M, 3500.0 + i, "slow") for i in range(3)]
    error = {"error.type": "TimeoutError"}
    spans += [Span("memory.recall", T0 + 2 * H, 2500.0, "broken", "Error", error)]
    observe_error = {"exception.type": "QdrantTimeout"}
    spans += [Span("memory.observe", T0 + 2 * H + M, 900.0, "broken", "Error", observe_error)]
    spans += [Span("memory.observe", T0 + 2 * H + 2 * M, 30.0, "slow", "Error", observe_error)]
    return spans


def _written(store: Store, preset: str) -> Source:
    table = unique_table()
    if preset == "joelclaw":
        _events().write(store, table)
    elif preset == "otel_logs":
        write_otel_logs(store, table, _events())
    else:
        write_otel_traces(store, table, _spans())
    source = {} if preset == "joelclaw" else {"source": {"preset": preset}}
    return Source(preset, table, {**source, "checks": CHECKS})


Details = dict[str, list[dict[str, Any]]]  # check id -> its evidence's event_details


def _details(document: dict[str, Any]) -> Details:
    return {
        check: result["evidence"]["event_details"]
        for check, result in document["checks"].items()
        if "event_details" in result.get("evidence", {})
    }


def _run(store: Store, source: Source, table: str | None = None) -> Details:
    settings = source.settings(table)
    return _details(run_once(store, settings, window_at(settings, AT), triage=True).to_json())


def _backtest(store: Store, source: Source, table: str | None = None) -> list[Details]:
    settings = source.settings(table)
    reports = run_windows(store, settings, windows_ending(settings, ENDS), triage=True)
    return [_details(report.to_json()) for report in reports]


@pytest.fixture(scope="module")
def worlds(store: Store) -> dict[str, tuple[Source, Details, list[Details]]]:
    """Each raw preset's table, its single-table details for one window and a backtest's."""
    found = {}
    for preset in PRESETS:
        source = _written(store, preset)
        found[preset] = (source, _run(store, source), _backtest(store, source))
    return found


@pytest.mark.parametrize("preset", PRESETS)
def test_the_world_lists_events_of_every_listing_check(worlds: dict[str, Any], preset: str) -> None:
    """On the single table every listing check lists events, with sessions and error classes:
    the cluster's details are compared with something."""
    _, single, backtest = worlds[preset]
    assert LISTING[preset] <= set(single)
    for check in LISTING[preset]:
        assert all(d["session_id"] and d["name"] for d in single[check]), check
    observe = {d["error_class"] for d in single["observe_failure_rate"]} - {None}
    assert observe == {OBSERVE_ERROR[preset]}
    assert all(d["error_class"] for d in single["recall_failure_rate"])
    assert all(d["latency_ms"] >= 3500 for d in single["recall_latency_p95"])
    assert any(window for window in backtest)


class Listed:
    """One window's run and a backtest (both with triage) on a Distributed table, made once for
    the tests that judge them: their details, and the queries they sent (for EXPLAIN)."""

    def __init__(self, store: Store, source: Source, table: str) -> None:
        recording = Recording(store)
        self.table = table
        self.run = _run(recording, source, table)
        self.backtest = _backtest(recording, source, table)
        self.sent = recording.sent


@pytest.fixture(scope="module")
def listed(store: Store, worlds: dict[str, Any]) -> Any:
    """`listed(preset, sharding, cluster)`: the world read through a Distributed table, and its
    run and backtest, made on first use."""
    made: dict[tuple[str, str, str], Listed] = {}

    def on(preset: str, sharding: str, cluster: str) -> Listed:
        if (preset, sharding, cluster) not in made:
            source, _, _ = worlds[preset]
            table = distributed(store, source, sharding, cluster)
            made[preset, sharding, cluster] = Listed(store, source, table)
        return made[preset, sharding, cluster]

    return on


@pytest.mark.parametrize(("preset", "sharding", "cluster"), CASES, ids=["-".join(c) for c in CASES])
def test_a_distributed_source_lists_the_single_tables_event_details(
    store: Store, worlds: dict[str, Any], preset: str, sharding: str, cluster: str, listed: Any
) -> None:
    """Each listed event's session, name, latency and error class, every listing check, one
    window (and, rows spread by `rand()`, a backtest's windows): as on one table."""
    source, single, backtest = worlds[preset]
    if sharding != "rand":  # one window only: no backtest to make
        assert _run(store, source, distributed(store, source, sharding, cluster)) == single
        return
    found = listed(preset, sharding, cluster)
    assert found.run == single
    assert found.backtest == backtest


# --- EXPLAIN: the lookup filters and groups on the shards -------------------------------------


def _lookups(found: Listed) -> list[tuple[str, dict[str, Any]]]:
    """The details lookups a run and a backtest sent (checks/listed.py: grouped by event id)."""
    return [(sql, p) for sql, p in found.sent if "ev_ids" in p and "GROUP BY event_id" in sql]


def _shard_texts(store: Store, sql: str, params: dict[str, Any]) -> tuple[str, list[str]]:
    """`EXPLAIN PLAN actions = 1` of `sql` split at its Union of the shards: (the initiator's
    lines above it, each shard's lines)."""
    lines = [str(row[0]) for row in store.query("EXPLAIN PLAN actions = 1 " + sql, params).rows]
    union = next(i for i, line in enumerate(lines) if line.lstrip(" │├└─") == "Union")
    depth = len(lines[union]) - len(lines[union].lstrip(" │├└─"))
    shards: list[list[str]] = []
    for line in lines[union + 1 :]:
        step = re.match(r"[ │]*[├└]──", line)
        if step and len(step.group(0)) == depth + 3:  # a child of the Union
            shards.append([])
        shards[-1].append(line)
    return "\n".join(lines[:union]), ["\n".join(shard) for shard in shards]


def _filters_ids(shard: str, ids: list[str]) -> bool:
    """Whether a shard's plan keeps only the cited ids: their set in its PREWHERE, or (an id
    computed per array-joined event, OpenTelemetry spans) a set in its ARRAY JOIN's filter."""
    listed = "IN (" + ", ".join(f"'{i}'" for i in ids) + ")"
    element = re.search(r"Element filter column: .*\bin\(.*__set_String", shard)
    return listed in shard or element is not None


@pytest.mark.parametrize("cluster", list(CLUSTERS))
@pytest.mark.parametrize("preset", PRESETS)
def test_the_listed_events_lookup_filters_and_groups_on_the_shards(
    store: Store, listed: Any, preset: str, cluster: str
) -> None:
    """EXPLAIN of the details lookup (rows spread by `rand()`): every shard filters by the cited
    ids and groups its rows by event id; the initiator merges their rows and filters nothing;
    each shard sends one row per cited id it holds."""
    found = listed(preset, "rand", cluster)
    lookups = _lookups(found)
    assert len(lookups) == 2  # one for the run, one for the backtest's windows
    for sql, params in lookups:
        root = plan(store, sql, params)
        assert not shards_merged_bare(root)
        merged = next(s for s in root.walk() if s.name == "MergingAggregated")
        assert [s.name for s in merged.children] == ["Union"]
        shards = merged.children[0].children
        assert len(shards) == CLUSTERS[cluster]
        for shard in shards:
            names = [s.name for s in shard.walk()]
            assert "Aggregating" in names and names[-1].startswith("Read"), names
        assert _initiator_steps(root, merged) == []
        initiator, texts = _shard_texts(store, sql, params)
        assert "Filter" not in initiator and "__set_" not in initiator
        assert len(texts) == CLUSTERS[cluster]
        assert all(_filters_ids(text, params["ev_ids"]) for text in texts), texts
        # What the initiator receives: each shard's groups, unmerged (counted, not used).
        sent = store.query(sql + "\nSETTINGS distributed_group_by_no_merge = 1", params).rows
        rows = store.query(f"SELECT count() FROM {found.table}").rows[0][0]
        assert len(params["ev_ids"]) <= len(sent) <= len(params["ev_ids"]) * CLUSTERS[cluster]
        assert len(sent) * 10 < rows


def _initiator_steps(root: Step, merged: Step) -> list[str]:
    """The steps above the shards' merge but its final projection (none: it only merges)."""
    above = []
    for step in root.walk():
        if step is merged:
            break
        if step.name and step.name != "Expression":
            above.append(step.name)
    return above
