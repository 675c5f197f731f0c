"""Properties of the evaluation engine, on the embedded engine, over generated worlds.

- insertion order and duplicated rows (in separate batches) change no verdict;
- shifting every timestamp and `at` by the same offset changes nothing;
- events after `at` change nothing;
- adding an unrelated session changes no other session's verdict.

A world is a list of session plans that together touch every check: cold
starts, late recalls, failed and lost outcomes, silent and explicit ends,
compactions, injections, gate decisions and deviation events. Each property
runs 3 examples. An example's cost is its evaluations (about 0.7 CPU-seconds
each, every check's queries, whatever the rows), not its rows, so its world
holds at least 4 sessions: what several small examples would have tried, one
table holds.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.slo.budget import bucket_floor
from checks.source_ddl import create_table_sql
from tests.builder import JOELCLAW_COLUMNS, T0, Event, H, M, S, Scenario, settings_for, unique_table
from watchdog.core.store import Store
from watchdog.core.times import rfc3339
from watchdog.runner.once import run_once, window_at

pytestmark = pytest.mark.slow

AT = T0 + 4 * H
EXAMPLES = settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Evidence is capped at 20 items; at most two failed or lost outcomes per session, so
# nine sessions and a newcomer stay within it and evidence membership is exact.
MAX_SESSIONS = 9

session_plan = st.fixed_dictionaries(
    {
        "start_min": st.integers(-120, 4 * 60 - 1),  # some start before the window
        "recall": st.sampled_from(["none", "ok", "late", "failed", "lost"]),
        "latency_ms": st.integers(1, 6000),
        "results": st.integers(0, 2),
        "injected": st.booleans(),
        "length_min": st.integers(1, 180),
        "end": st.sampled_from(["silent", "session.ended", "session.shutdown"]),
        "observe": st.sampled_from(["none", "ok", "failed", "lost", "late"]),
        "compacts": st.booleans(),
        "compaction_observed": st.booleans(),
        "gate": st.sampled_from([None, "allow", "discard", "hold"]),
        "deviation": st.sampled_from([None, "good", "bad_tipo", "extra_key", "missing_evidence"]),
    }
)
# No example is spent on a world of one or two sessions: its rows cost next to nothing.
worlds = st.lists(session_plan, min_size=4, max_size=MAX_SESSIONS)


def add_session(sc: Scenario, sid: str, plan: dict[str, Any], shift: timedelta) -> None:
    """The events of one session plan, every timestamp moved by `shift`."""
    start = T0 + plan["start_min"] * M + shift
    end = start + plan["length_min"] * M
    b = sc.session(sid).starts(start)
    first_id = sc.events[-1].id
    recall = plan["recall"]
    if recall != "none":
        at = start + (10 * M if recall == "late" else 2 * S)
        b.emits("memory.recall.started", at)
        if recall == "failed":
            b.emits("memory.recall.failed", at + S, success=0)
        elif recall != "lost":
            meta = {"latency_ms": plan["latency_ms"], "result_count": plan["results"]}
            b.emits("memory.recall.completed", at + S, meta=meta)
            if plan["results"] and plan["injected"]:
                b.emits("memory.recall.injected", at + 2 * S)
    if plan["gate"]:
        b.emits("memory.gate.decision", start + 3 * S, meta={"verdict": plan["gate"]})
    if plan["compacts"]:
        compaction = start + plan["length_min"] * M / 2
        b.emits("compaction.before", compaction)
        if plan["compaction_observed"]:
            b.emits("memory.observe.requested", compaction + 30 * S)
            b.emits("observe.store.completed", compaction + 31 * S)
    if plan["deviation"]:
        payload: dict[str, Any] = {"agente": "po", "tipo": "laco", "evidenceEventIds": [first_id]}
        if plan["deviation"] == "bad_tipo":
            payload["tipo"] = "desvio"
        elif plan["deviation"] == "extra_key":
            payload["nota"] = "free text"
        elif plan["deviation"] == "missing_evidence":
            payload["evidenceEventIds"] = [f"missing-{sid}"]
        b.deviates(start + 4 * S, {**payload, "session_id": sid})
    b.emits("tool.call.completed", end)
    if plan["end"] != "silent":
        b.emits(plan["end"], end)
    observe = plan["observe"]
    if observe != "none":
        at = end + (30 * M if observe == "late" else S)
        b.emits("memory.observe.requested", at)
        if observe in ("ok", "late"):
            b.emits("observe.store.completed", at + S)
        elif observe == "failed":
            b.emits("observe.store.failed", at + S, success=0)


def build(plans: list[dict[str, Any]], shift: timedelta = timedelta(0)) -> Scenario:
    sc = Scenario()
    for i, plan in enumerate(plans):
        add_session(sc, f"s{i:02d}", plan, shift)
    return sc


def write_batches(store: Store, table: str, batches: list[list[Event]]) -> None:
    """Create the table and insert each batch as its own insert (its own part)."""
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(create_table_sql("joelclaw", table, ttl=False))
    received = datetime(2026, 12, 1, tzinfo=UTC)
    for n, batch in enumerate(batches):
        rows = [e.row(received - n * timedelta(seconds=1)) for e in batch]
        store.insert(table, rows, JOELCLAW_COLUMNS)


def evaluate(store: Store, batches: list[list[Event]], at: datetime = AT) -> dict[str, Any]:
    table = unique_table()
    write_batches(store, table, batches)
    config = settings_for(table)
    report = run_once(store, config, window_at(config, at)).to_json()
    del report["source"]  # the table's name, unique per evaluation
    return report


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """What a property compares: every check's result and the deviation aggregation."""
    return {"checks": report["checks"], "deviations": report["deviations"]}


@EXAMPLES
@given(plans=worlds, seed=st.integers(0, 2**32 - 1), batches=st.integers(1, 4))
def test_insertion_order_and_duplicated_rows_change_no_verdict(
    store: Store, plans: list[dict[str, Any]], seed: int, batches: int
) -> None:
    """Rows shuffled, split into batches, some written twice: the verdicts do not move."""
    events = build(plans).events
    rng = random.Random(seed)
    shuffled = events + rng.sample(events, k=rng.randint(0, len(events)))  # duplicates
    rng.shuffle(shuffled)
    cut = sorted(rng.sample(range(1, len(shuffled)), k=min(batches - 1, len(shuffled) - 1)))
    parts = [shuffled[a:b] for a, b in zip([0, *cut], [*cut, len(shuffled)], strict=True)]
    assert verdicts(evaluate(store, parts)) == verdicts(evaluate(store, [events]))


def unshifted(value: Any, offset: timedelta) -> Any:
    """`value` with every RFC 3339 time in it moved back by `offset`."""
    if isinstance(value, str) and value.endswith("Z") and value[:2] in ("19", "20", "21", "22"):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return rfc3339(moment - offset)
    if isinstance(value, dict):
        return {k: unshifted(v, offset) for k, v in value.items()}
    if isinstance(value, list):
        return [unshifted(v, offset) for v in value]
    return value


@EXAMPLES
@given(
    plans=worlds,
    offset_ms=st.integers(-(10**11), 10**12),  # about three years back to thirty ahead
)
def test_shifting_every_time_and_at_changes_nothing(
    store: Store, plans: list[dict[str, Any]], offset_ms: int
) -> None:
    """The same world moved in time, judged at the moved `at`, has the same report; its SLOs
    are read at the epoch-aligned bucket boundary at or before the moved `at` (an absolute
    time: docs/slo.md#the-ledger), with the same figures."""
    offset = timedelta(milliseconds=offset_ms)
    base = evaluate(store, [build(plans).events])
    moved = evaluate(store, [build(plans, shift=offset).events], at=AT + offset)
    base_slos, moved_slos = base.pop("slos"), moved.pop("slos")
    assert unshifted(moved, offset) == base
    boundary = rfc3339(bucket_floor(AT + offset, settings_for(unique_table()).slo.bucket))
    assert {name: slo.pop("at") for name, slo in moved_slos.items()} == dict.fromkeys(
        base_slos, boundary
    )
    assert moved_slos == {
        name: {k: v for k, v in slo.items() if k != "at"} for name, slo in base_slos.items()
    }


@EXAMPLES
@given(
    plans=worlds,
    later=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "session.started",
                    "memory.recall.started",
                    "memory.recall.completed",
                    "memory.recall.failed",
                    "memory.observe.requested",
                    "observe.store.completed",
                    "observe.store.failed",
                    "session.ended",
                    "memory.gate.decision",
                    "anamnese.agent_deviation",
                ]
            ),
            st.integers(0, 48 * 3600 * 1000),  # ms after `at` (0: exactly at `at`)
            st.integers(0, MAX_SESSIONS + 2),  # a session of the world, or a new one
        ),
        min_size=1,
        max_size=15,
    ),
)
def test_events_after_at_change_nothing(
    store: Store, plans: list[dict[str, Any]], later: list[tuple[str, int, int]]
) -> None:
    """Events at or after `at`, of old sessions or new ones, do not exist for the evaluation."""
    sc = build(plans)
    base = evaluate(store, [sc.events])
    for name, after_ms, session in later:
        sc.event(name, AT + timedelta(milliseconds=after_ms), f"s{session:02d}")
    assert evaluate(store, [sc.events]) == base


def membership(report: dict[str, Any], ids: set[str]) -> dict[str, list[str]]:
    """Per check, which of `ids` (sessions or events) its evidence names, sorted."""
    found: dict[str, list[str]] = {}
    for check_id, result in report["checks"].items():
        evidence = result["evidence"]
        named = set(evidence.get("sessions", [])) | set(evidence.get("events", []))
        found[check_id] = sorted(named & ids)
    return found


@EXAMPLES
@given(plans=worlds, newcomer=session_plan)
def test_an_unrelated_session_changes_no_other_sessions_verdict(
    store: Store, plans: list[dict[str, Any]], newcomer: dict[str, Any]
) -> None:
    """Adding one more session leaves every other session's (and event's) place in the evidence."""
    sc = build(plans)
    ids = {e.session for e in sc.events if e.session} | {e.id for e in sc.events}
    base = evaluate(store, [sc.events])
    emits_injection = any(e.name == "memory.recall.injected" for e in sc.events)
    add_session(sc, "zz-newcomer", newcomer, timedelta(0))
    grown = evaluate(store, [sc.events])
    before, after = membership(base, ids), membership(grown, ids)
    if not emits_injection:
        # docs/spec.md section 5: recall_injection is no_data while the source emits no
        # recall_injected event at all; a newcomer that emits one makes the source judgeable,
        # by design.
        del before["recall_injection"], after["recall_injection"]
    assert after == before, json.dumps(newcomer)
