"""The check kinds' contract: one suite over every registered kind, and one defined only here.

Every check of the suite, built-in and custom (a table per kind `[[checks.custom]]`
can declare, and `volume`, a kind this module defines, in a registry of its own: `SUITE`), is
judged on one world that breaches it, from the events and from the session
state, and must give one verdict on both, triage its breach, describe itself,
show in `explain` what it counts, and round-trip from config. A declarable kind
that the tables below do not cover brings its own table and the events that
breach it (`Kind.example`), added to the world here. A kind that passes here is
a kind the watchdog runs: that is what makes a new kind one module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from checks.base import CheckSpec, KindParams, Report, Status, Unit
from checks.builtin import configured_checks
from checks.evidence import Evidence
from checks.kinds import describe_check, kind_of, spec_of
from checks.kinds.base import Declared, Described, Example, ExampleEvent, Flag
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE
from checks.scans.window import LISTED
from checks.verdict import judge
from tests import test_engine_properties as engine
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from tests.cluster import CLUSTERS, distribute
from tests.test_cluster import Source, _materialized
from tests.test_schema import _scenario as every_check
from tests.test_session_state import AT, EXAMPLES, Materialized
from tests.test_session_state import _same as same_reports
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.store import Store
from watchdog.runner.explain import explain
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

# The module's worlds are judged once, on one worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("kinds")

# --- a kind defined only in this module -------------------------------------------------


@dataclass(frozen=True)
class Volume(KindParams):
    """How many events of `events` happened in W."""

    events: tuple[str, ...]


class VolumeConfig(CustomCheck):
    """`kind = "volume"`: breached when the window's count of `events` crosses the target."""

    kind: Literal["volume"]
    events: tuple[str, ...] = Field(min_length=1)


class VolumeKind(Declared[Volume, VolumeConfig]):
    name = "volume"
    params = Volume
    config = VolumeConfig

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.window(spec)
        tag = scan.tag()
        scan.member(tag, p.events)
        h = scan.add_totals(
            tag,
            {
                "n": f"countIf({tag}_in)",
                "oldest": f"groupArraySortedIf({EVIDENCE})(CAST(({tag}_t, event_id) AS {LISTED}),"
                f" {tag}_in)",
            },
            shown=("n", "oldest"),
        )
        carried = scan.carry_triage(tag, f"{tag}_in")

        def read(row: Row, ctx: Context) -> Judged:
            n = int(row[h["n"]])
            events = tuple(str(e["id"]) for e in row[h["oldest"]])
            result = judge(spec, float(n), n, f"{n} events", Evidence(events=events))
            breached = result.status is Status.BREACHED
            return Judged(result, carried.read(row) if carried and breached else None)

        return read

    def describe(self, params: Volume) -> Described:
        return [("counted", ", ".join(params.events))]

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        """Every event of its names counts (`explain` marks each)."""
        return Flag(self.of(spec).events, "1", bind("counted", "String"))

    def example(self) -> Example:
        """Three events of a name nothing else emits, against a target of 2."""
        after = [timedelta(hours=3, minutes=k) for k in range(3)]
        return Example(
            {"kind": "volume", "events": ["volume.tick"], "target": 2},
            tuple(ExampleEvent("volumes", "volume.tick", t) for t in after),
        )

    def from_config(self, config: VolumeConfig) -> tuple[Volume, Unit]:
        return Volume(config.events), Unit.COUNT


VOLUME = VolumeKind()


# The registry of this suite: every kind the watchdog has, and `volume`. The process's
# registry (PLUGINS) is left as it is: nothing is registered into a global and out again.
SUITE = PLUGINS.with_(kinds=[VOLUME])


# --- the checks of the suite: every built-in one, and a custom table per declarable kind ---

RECALLS = ["memory.recall.started", "memory.recall.completed", "memory.recall.failed"]
CUSTOM: dict[str, dict[str, Any]] = {
    "cov_start": {
        "kind": "coverage",
        "required": RECALLS,
        "grace": "1m",
        "session_filter": "component != 'nobody'",
    },
    "cov_events": {
        "kind": "coverage",
        "trigger": ["compaction.before"],
        "required": ["memory.observe.completed"],
        "until": ["session.ended"],
        "grace": "10s",
        "count": "events",
    },
    "rate": {
        "kind": "outcome_rate",
        "started": ["memory.recall.started"],
        "completed": ["memory.recall.completed"],
        "failed": ["memory.recall.failed"],
        "grace": "1m",
        "target": 0.01,
    },
    "p90": {"kind": "quantile", "events": ["memory.recall.completed"], "q": 0.9, "target": 100},
    "streak": {
        "kind": "streak",
        "bad": ["memory.recall.failed"],
        "good": ["memory.recall.completed"],
        "target": 1,
    },
    "share": {
        "kind": "share",
        "events": ["memory.gate.decision"],
        "field": "verdict",
        "value": "allow",
        "target": 0.1,
    },
    "fresh": {"kind": "freshness", "events": ["memory.gate.decision"], "target": 60},
}
# The declarable kinds the tables above do not cover bring their own table and breach.
EXAMPLES_OF = {
    kind.name: example
    for kind in SUITE.kinds
    if isinstance(kind, Declared)
    and kind.name not in {table["kind"] for table in CUSTOM.values()}
    and (example := kind.example()) is not None
}
CUSTOM.update({name: dict(example.table) for name, example in EXAMPLES_OF.items()})
TABLES = [{"id": i, "target": 0, "min_samples": 0, **t} for i, t in CUSTOM.items()]
# Every built-in check judged on little data, and breached by the world below.
OVERRIDES = {
    **{check_id: {"min_samples": 0} for check_id in PLUGINS.check_ids},
    "telemetry_freshness": {"min_samples": 0, "target": 60},
    "write_gate_drift": {"min_samples": 0, "target": 0.2},
}
CONFIG = {"checks": {**OVERRIDES, "custom": TABLES}}
CHECKS = [*SUITE.check_ids, *CUSTOM]


def settings() -> Settings:
    return settings_from_mapping(CONFIG, plugins=SUITE, env={})


def _world() -> Scenario:
    """A world breaching every check of the suite."""
    world = every_check()
    late = world.session("late").starts(T0 + 3 * H).recalls(T0 + 3 * H + 2 * M)
    late.compacts(T0 + 3 * H + 5 * M).ends(T0 + 3 * H + 6 * M)
    late.asks(T0 + 3 * H + 3 * M).answers(T0 + 3 * H + 4 * M)  # no recall between them
    for i in range(3):
        world.session(f"fails{i}").starts(T0 + 3 * H + i * S).recalls(
            T0 + 3 * H + i * S + S, fails=True
        )
    # Deviations of a session (its id in their payload, as the agents write it), so that
    # `explain` shows what the deviation checks count: one breaks the contract, one cites
    # an event that exists nowhere.
    late.deviates(T0 + 3 * H + 7 * M, {"session_id": "late", "agente": "po", "tipo": "laco"})
    late.deviates(
        T0 + 3 * H + 8 * M,
        {"session_id": "late", "agente": "qa", "tipo": "laco", "evidenceEventIds": ["ev-none"]},
    )
    for example in EXAMPLES_OF.values():
        for event in example.events:
            world.session(event.session).emits(event.name, T0 + event.after, meta=dict(event.meta))
    return world


@pytest.fixture(scope="module")
def judged(store: Store) -> tuple[Report, Report]:
    """The world judged with its triage, from the events and from the session state."""
    built = Materialized(store, CONFIG, plugins=SUITE).apply()
    built.write(_world().events)
    return tuple(  # type: ignore[return-value]
        run_once(store, s, window_at(s, AT), triage=True) for s in (built.raw, built.stateful)
    )


@pytest.fixture(scope="module")
def clustered(store: Store) -> tuple[Report, Report]:
    """The same world judged on a cluster: the raw table through a Distributed table over 3
    local shards (rows spread as `rand()` spreads them), and the state built by the
    materialize statements' cluster DDL on 2 (tests/test_cluster.py)."""
    world = _world()
    table = unique_table()
    world.write(store, table)
    raw = distribute(store, table, "three", "rand()", "cityHash64(id, received_at)")
    built = _materialized(store, Source("joelclaw", table, CONFIG, SUITE), "two")
    return tuple(  # type: ignore[return-value]
        run_once(store, s, window_at(s, AT), triage=True)
        for s in (settings_for(raw.table, CONFIG, plugins=SUITE), built.state)
    )


@pytest.mark.slow
@hypothesis.settings(EXAMPLES, max_examples=3)
@given(
    plans=engine.worlds,
    at_offset_ms=st.integers(-3 * 3600 * 1000, 3 * 3600 * 1000),
    lookback_min=st.integers(7 * 60, 30 * 60),
)
def test_every_check_gives_one_verdict_on_generated_worlds(
    store: Store, plans: list[dict[str, Any]], at_offset_ms: int, lookback_min: int
) -> None:
    """The engine properties' worlds, at any `at` and lookback, judged by every check of the
    suite: the same report from the events and from the state (the lookback's ends fall
    inside buckets, read from the events, and sessions straddle them)."""
    config = {**CONFIG, "window": {"lookback": f"{lookback_min}m"}, "schedule": {"every": "1h"}}
    at = AT + timedelta(milliseconds=at_offset_ms)
    same_reports(store, engine.build(plans), at, config, plugins=SUITE)


def test_every_registered_kind_is_in_the_suite() -> None:
    """The suite judges at least one check of every kind the registry holds."""
    kinds = {kind_of(spec).name for spec in configured_checks(settings())}
    missing = {kind.name for kind in SUITE.kinds} - kinds
    assert not missing, f"kinds the suite judges no check of (give them an example()): {missing}"


@pytest.mark.parametrize("check_id", CHECKS)
def test_the_events_and_the_session_state_give_one_verdict(
    judged: tuple[Report, Report], check_id: str
) -> None:
    """A check's result and triage are the same read from the events and from the state."""
    raw, state = judged
    assert raw.checks[check_id].to_json() == state.checks[check_id].to_json()
    assert (raw.triage.get(check_id) or 0) == (state.triage.get(check_id) or 0)


@pytest.mark.parametrize("check_id", CHECKS)
def test_on_a_cluster_a_check_gives_the_single_tables_verdict(
    judged: tuple[Report, Report], clustered: tuple[Report, Report], check_id: str
) -> None:
    """A check's result and triage are the single table's on a Distributed table over 3 shards
    and on the session state sharded over 2."""
    single, _ = judged
    for report in clustered:
        assert report.checks[check_id].to_json() == single.checks[check_id].to_json()
        assert (report.triage.get(check_id) or 0) == (single.triage.get(check_id) or 0)


@pytest.mark.slow
@hypothesis.settings(EXAMPLES, max_examples=2)
@given(plans=engine.worlds, at_offset_ms=st.integers(-3 * 3600 * 1000, 3 * 3600 * 1000))
def test_generated_worlds_on_a_cluster_give_the_single_tables_report(
    store: Store, plans: list[dict[str, Any]], at_offset_ms: int
) -> None:
    """The engine properties' worlds, judged by every check of the suite through a Distributed
    table whose rows are spread as `rand()` spreads them (a session's events, and the copies of
    one event, on several shards), on every cluster: the single table's whole report, triage
    included."""
    table = unique_table()
    engine.build(plans).write(store, table)
    at = AT + timedelta(milliseconds=at_offset_ms)

    def report(source: str) -> dict[str, Any]:
        settings = settings_for(source, CONFIG, plugins=SUITE)
        judged = run_once(store, settings, window_at(settings, at), triage=True).to_json()
        del judged["source"]
        return judged

    single = report(table)
    for shards in sorted(CLUSTERS):  # each example on both: one more run, not one more example
        dist = distribute(store, table, shards, "rand()", "cityHash64(id, received_at)")
        assert report(dist.table) == single, shards


@pytest.mark.parametrize("check_id", CHECKS)
def test_a_breach_is_triaged(judged: tuple[Report, Report], check_id: str) -> None:
    """The world breaches every check; each kind with failing items breaks them down."""
    raw, _ = judged
    assert raw.checks[check_id].status is Status.BREACHED
    spec = next(s for s in configured_checks(settings()) if s.id == check_id)
    if not kind_of(spec).triaged:
        assert check_id not in raw.triage
        return
    breakdown = raw.triage[check_id]
    assert breakdown.error == "" and breakdown.items > 0
    assert breakdown.dimensions  # grouped by the source's dimensions


@pytest.mark.parametrize("check_id", CHECKS)
def test_a_check_describes_itself(check_id: str) -> None:
    """Every check names the parameters that define it, in words (the page shows them)."""
    spec = next(s for s in configured_checks(settings()) if s.id == check_id)
    described = describe_check(spec)
    assert described and all(name and text for name, text in described)


@pytest.fixture(scope="module")
def explained(store: Store) -> dict[str, set[str]]:
    """Check id -> the sessions of the world in whose `explain` it shows: an event it counts
    (the kind's `flag`) or an obligation it judges (`obligations`, `judges`)."""
    world = _world()
    table = unique_table()
    world.write(store, table)
    config = settings_for(table, CONFIG, plugins=SUITE)
    shown: dict[str, set[str]] = {}
    for session_id in sorted({e.session for e in world.events if e.session}):
        told = explain(store, config, session_id, AT)
        for event in told.events:
            for finding in event.findings:
                shown.setdefault(finding.check_id, set()).add(session_id)
        for had in told.obligations:
            if had.judged:
                shown.setdefault(had.check_id, set()).add(session_id)
    return shown


@pytest.mark.parametrize("check_id", CHECKS)
def test_explain_shows_what_a_check_counts(explained: dict[str, set[str]], check_id: str) -> None:
    """In the world that breaches it, every check shows in some session's `explain` what it
    counted, unless its kind says why one session has nothing of it to show."""
    spec = next(s for s in configured_checks(settings()) if s.id == check_id)
    kind = kind_of(spec)
    if kind.unexplained:
        assert kind.flag(spec, Binder("x")) is None and not kind.obligations(spec.params)
        return
    assert explained.get(check_id), f"{kind.name}: no flag or obligation shows in explain"


@pytest.mark.parametrize("table", TABLES, ids=[t["id"] for t in TABLES])
def test_a_custom_table_round_trips_through_its_kinds_model(table: dict[str, Any]) -> None:
    """A table read into its kind's model, written back out and read again is the same check."""
    first = settings_from_mapping({"checks": {"custom": [table]}}, plugins=SUITE, env={})
    (model,) = first.custom_checks
    dumped = model.model_dump(mode="json")
    again = settings_from_mapping({"checks": {"custom": [dumped]}}, plugins=SUITE, env={})
    assert again.custom_checks == first.custom_checks
    assert spec_of(SUITE, again.custom_checks[0]) == spec_of(SUITE, model)
