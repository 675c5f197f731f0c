"""The SLO bucket invariant (issue 42, docs/slo.md#buckets): for a window whose ends are bucket
boundaries, the sums over its buckets are the check's own counts, on the raw source, the session
state and a Distributed source over local shards, with hostile data."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from checks.builtin import configured_checks
from checks.kinds import session_scopes
from checks.slo.counts import bucket_windows, judge_buckets
from checks.slo.specs import slo_specs
from checks.sources import open_source
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from tests.cluster import distribute
from tests.test_session_state import Materialized
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at

AT = T0 + 6 * H
LENGTH = 4 * H
CONFIG: dict[str, Any] = {"schedule": {"every": "4h"}}


def hostile(seed: int) -> Scenario:
    """Sessions spanning the window's edges, with failed and lost outcomes, latencies around
    the 3s target, duplicated events, placeholder session ids, sessionless outcomes, and
    outcomes landing exactly on their deadlines and on bucket boundaries."""
    rnd = random.Random(seed)
    sc = Scenario()
    for i in range(24):
        sid = rnd.choice([f"s{i}", f"s{i}", f"s{i}", "", "unknown"])
        session = sc.session(sid)
        start = T0 + rnd.randrange(0, 7 * 3600) * S
        session.starts(start)
        for _ in range(rnd.randrange(1, 8)):
            t = start + rnd.randrange(0, 3 * 3600) * S
            if rnd.random() < 0.3:
                t = t.replace(second=0) - timedelta(minutes=t.minute % 5)  # on a boundary
            latency = rnd.choice([200, 2999, 3000, 3001, 9000])
            session.recalls(t, latency_ms=latency, fails=rnd.random() < 0.2)
            r = rnd.random()
            session.observes(t + 10 * S, fails=r < 0.2, lost=0.2 <= r < 0.4)
        # A recall whose outcome lands exactly at its deadline (ts + recall_grace), and a lost
        # observe whose deadline (ts + observe_grace) is exactly a bucket boundary.
        edge = (start + H).replace(second=0) - timedelta(minutes=(start + H).minute % 5)
        session.emits("memory.recall.started", edge - 5 * M)
        session.emits("memory.recall.completed", edge, meta={"latency_ms": 3000.0})
        session.emits("memory.observe.requested", edge - 15 * M)
    for event in rnd.sample(sc.events, len(sc.events) // 5):
        sc.duplicate(event)
    for k in range(6):  # outcomes with no session at all
        sc.event("memory.recall.failed", T0 + 3 * H + k * 7 * M, None, success=0)
        sc.event("observe.store.completed", T0 + 4 * H + k * 5 * M, None)
    return sc


def check_counts(store: Store, settings: Settings) -> dict[str, tuple[int, int]]:
    """Per SLO, (good, bad) as the check reports them over the window ending at AT."""
    report = run_once(store, settings, window_at(settings, AT, LENGTH))
    counts = {}
    for slo in slo_specs(settings, configured_checks(settings)):
        result = report.checks[slo.check.id]
        ev = result.evidence
        if slo.sli == "ratio":
            counts[slo.name] = (ev.completed or 0, (ev.failed or 0) + (ev.lost or 0))
        else:
            above = ev.at_or_above_target or 0
            counts[slo.name] = (result.sample_size - above, above)
    return counts


def bucket_sums(store: Store, settings: Settings) -> dict[str, tuple[int, int]]:
    """Per SLO, the sums of its buckets' good and bad over [AT - LENGTH, AT)."""
    specs = configured_checks(settings)
    slos = slo_specs(settings, specs)
    bucket = settings.slo.bucket
    starts = [AT - LENGTH + i * bucket for i in range(LENGTH // bucket)]
    source = open_source(store, settings.source, session_scopes(specs))
    windows = bucket_windows(starts, bucket, settings.window.reach(bucket))
    found = judge_buckets(store, source, slos, windows)
    sums = {}
    for name, buckets in found.items():
        assert None not in buckets
        sums[name] = (sum(b.good for b in buckets if b), sum(b.bad for b in buckets if b))
    return sums


def assert_invariant(store: Store, settings: Settings) -> None:
    expected = check_counts(store, settings)
    assert sum(g + b for g, b in expected.values()) > 0  # the scenario is not empty
    assert bucket_sums(store, settings) == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bucket", ["5m", "1m"])
def test_bucket_sums_equal_the_checks_counts_on_the_raw_source(
    store: Store, seed: int, bucket: str
) -> None:
    """Raw source: completed = good, failed + lost = bad; the p95's sample split at the target."""
    table = unique_table()
    hostile(seed).write(store, table)
    assert_invariant(store, settings_for(table, {**CONFIG, "slo": {"bucket": bucket}}))


@pytest.mark.parametrize("seed", [1, 2])
def test_bucket_sums_equal_the_checks_counts_on_the_session_state(store: Store, seed: int) -> None:
    """Session state (`source.state`): the same sums as the check reads from the state."""
    m = Materialized(store, CONFIG).apply()
    m.write(hostile(seed).events)
    assert_invariant(store, m.stateful)


@pytest.mark.xdist_group("cluster")
@pytest.mark.parametrize("seed", [1, 2])
def test_bucket_sums_equal_the_checks_counts_on_a_distributed_source(
    store: Store, seed: int
) -> None:
    """A Distributed table over local shards, rows spread by session: the same sums."""
    table = unique_table()
    hostile(seed).write(store, table)
    spread = "cityHash64(JSONExtractString(metadata_json, 'session_id'))"
    sharded = distribute(store, table, "two", "rand()", spread)
    assert_invariant(store, settings_for(sharded.table, CONFIG))


def test_the_buckets_of_an_outcome_follow_its_deadline(store: Store) -> None:
    """A lost observe counts in the bucket of its deadline (requested + 15m), not of its ts."""
    sc = Scenario()
    sc.session("s1").starts(T0 + 2 * H).observes(T0 + 2 * H + 2 * M, lost=True)
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table, CONFIG)
    specs = configured_checks(settings)
    (slo,) = [s for s in slo_specs(settings, specs) if s.name == "observe_success"]
    bucket = settings.slo.bucket
    starts = [T0 + 2 * H + i * bucket for i in range(12)]
    source = open_source(store, settings.source, session_scopes(specs))
    windows = bucket_windows(starts, bucket, settings.window.reach(bucket))
    found = judge_buckets(store, source, [slo], windows)["observe_success"]
    bad = {b.start: b.bad for b in found if b is not None and b.bad}
    assert bad == {T0 + 2 * H + 15 * M: 1}


def test_a_custom_checks_own_window_does_not_stretch_its_buckets(store: Store) -> None:
    """A custom outcome-rate check with `window = "1h"`: its buckets over the last hour sum to
    what it reports for that hour (each bucket stays one bucket long)."""
    custom = {
        "id": "observe_hourly",
        "kind": "outcome_rate",
        "started": ["memory.observe.requested"],
        "completed": ["observe.store.completed"],
        "failed": ["observe.store.failed"],
        "grace": "15m",
        "target": "5%",
        "window": "1h",
    }
    config = {
        **CONFIG,
        "checks": {"custom": [custom]},
        "slo": {"hourly": {"check": "observe_hourly", "objective": "99%"}},
    }
    table = unique_table()
    hostile(4).write(store, table)
    settings = settings_for(table, config)
    specs = configured_checks(settings)
    (slo,) = [s for s in slo_specs(settings, specs) if s.name == "hourly"]
    ev = (
        run_once(store, settings, window_at(settings, AT, LENGTH)).checks["observe_hourly"].evidence
    )
    bucket = settings.slo.bucket
    starts = [AT - H + i * bucket for i in range(H // bucket)]
    source = open_source(store, settings.source, session_scopes(specs))
    windows = bucket_windows(starts, bucket, settings.window.reach(bucket))
    found = judge_buckets(store, source, [slo], windows)["hourly"]
    sums = (sum(b.good for b in found if b), sum(b.bad for b in found if b))
    assert sums == (ev.completed, (ev.failed or 0) + (ev.lost or 0))
    assert sum(sums) > 0
