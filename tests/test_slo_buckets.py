"""The SLO bucket invariant (issue 42, docs/slo.md#buckets): for a window whose ends are bucket
boundaries, the sums over its buckets are the check's own counts, on the raw source, the session
state and a Distributed source over local shards, with hostile data."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from checks.builtin import configured_checks
from checks.kinds import session_scopes
from checks.kinds.outcome_rate import OutcomeRate, OutcomeRateKind
from checks.slo.counts import bucket_lookback, bucket_windows, judge_buckets
from checks.slo.specs import slo_specs
from checks.sources import open_source
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from tests.cluster import distribute
from tests.test_cluster import Recording
from tests.test_session_state import Materialized
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import to_ms
from watchdog.runner.once import run_once, window_at
from watchdog.runner.slo import judge_range

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
    windows = bucket_windows(starts, bucket, bucket_lookback(settings, slos))
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
    windows = bucket_windows(starts, bucket, bucket_lookback(settings, [slo]))
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
    windows = bucket_windows(starts, bucket, bucket_lookback(settings, [slo]))
    found = judge_buckets(store, source, [slo], windows)["hourly"]
    sums = (sum(b.good for b in found if b), sum(b.bad for b in found if b))
    assert sums == (ev.completed, (ev.failed or 0) + (ev.lost or 0))
    assert sum(sums) > 0


def test_the_narrow_read_judges_every_bucket_as_the_whole_lookback_does(store: Store) -> None:
    """Each bucket read from its end back over the bucket and the longest grace (20 minutes by
    default) has the good and bad events it has read over the whole 24h lookback."""
    table = unique_table()
    hostile(5).write(store, table)
    settings = settings_for(table, CONFIG)
    specs = configured_checks(settings)
    slos = slo_specs(settings, specs)
    bucket = settings.slo.bucket
    assert bucket_lookback(settings, slos) == bucket + 15 * M  # observe_grace, the longest
    starts = [AT - LENGTH + i * bucket for i in range(LENGTH // bucket)]
    source = open_source(store, settings.source, session_scopes(specs))
    narrow = judge_buckets(store, source, slos, bucket_windows(starts, bucket, bucket + 15 * M))
    whole = judge_buckets(
        store, source, slos, bucket_windows(starts, bucket, settings.window.reach(bucket))
    )
    assert narrow == whole
    assert any(b is not None and b.bad for b in narrow["observe_success"])


class Leadless(OutcomeRateKind):
    """An outcome rate that does not say how far before a bucket it reads."""

    def slo_lead(self, params: OutcomeRate) -> None:  # type: ignore[override]
        return None


def test_an_slo_over_a_kind_that_names_no_lead_reads_the_whole_lookback() -> None:
    """A kind that cannot say how far before a bucket it looks (none of the SLO kinds today)
    has its buckets read over the lookback: never fewer events than the check reads."""
    settings = settings_for("agents.none", CONFIG)
    slos = slo_specs(settings, configured_checks(settings))
    leadless = [replace(slos[0], check=replace(slos[0].check, kind=Leadless()))]
    assert bucket_lookback(settings, leadless) == settings.window.reach(settings.slo.bucket)


def _times_read(sent: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """The epoch-millisecond bounds bound to the queries of the events (not the ledger's)."""
    found: list[int] = []
    for sql, params in sent:
        if "system." in sql or ".slo_buckets" in sql or "LIMIT 0" in sql:
            continue
        for value in params.values():
            values = value if isinstance(value, list) else [value]
            found += [v for v in values if isinstance(v, int) and v > 10**12]
    return found


def test_a_burn_tick_reads_only_its_buckets_minutes(store: Store) -> None:
    """Judging one closed bucket (what a burn tick does once the period is judged) binds no
    time before the bucket's start less the longest grace: a range read of the narrow table,
    not a read of the 24h lookback (docs/slo.md#what-a-burn-tick-costs)."""
    table = unique_table()
    hostile(1).write(store, table)
    settings = settings_for(table, CONFIG)
    start = AT - settings.slo.bucket
    recording = Recording(store)
    ranges = dict.fromkeys(settings.slo.enabled, (start, AT))
    done = judge_range(recording, settings, ranges, now=AT + H)
    assert done.judged == len(settings.slo.enabled) and done.passes == 1
    bounds = _times_read(recording.sent)
    assert bounds  # the judging bound its window's times
    assert min(bounds) == to_ms(start - 15 * M)
    assert max(bounds) == to_ms(AT)
