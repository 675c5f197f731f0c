"""Issue 42's "done when": an independent four-day scenario (a slow burn, a fast burst, slow
recalls) whose SLO figures, read from the backfilled ledger, match an oracle on every figure.

The oracle is written here from docs/spec.md section 11 alone, in plain Python over the list of
outcomes the scenario generated: it imports nothing of the product's SLO arithmetic (the
product only writes the events, backfills the ledger and reports). Every outcome arrives a
second (observes) or a few seconds (recalls) after its trigger, well within the graces, so no
outcome is lost and a bucket's counts are the outcomes whose `ts` it holds.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checks.builtin import configured_checks
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.slo import backfill, slo_reports

DAY = timedelta(days=1)
END = T0 + 4 * DAY
BURST = T0 + 2 * DAY + 10 * H  # day 3: an hour where half the observes fail
SLOW = T0 + 3 * DAY + 8 * H  # day 4: four hours where most recalls are slow
BUCKET = timedelta(minutes=5)
PERIOD = timedelta(days=30)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The times compared: the first minutes (too few events), before the burst, 5 and 10 minutes
# and an hour into it, amid the slow recalls, and the end of day 4.
TIMES = (
    T0 + 10 * M,
    BURST,
    BURST + 5 * M,
    BURST + 10 * M,
    BURST + H,
    SLOW + 3 * H,
    END,
)

# Spec section 11: objective by SLO; the tiers' windows and budget shares.
OBJECTIVES = {"observe_success": 0.99, "recall_success": 0.99, "recall_latency": 0.95}
TIERS = (
    ("page-fast", "page", H, 5 * M, 0.02),
    ("page-slow", "page", 6 * H, 30 * M, 0.05),
    ("ticket-fast", "ticket", DAY, 2 * H, 0.10),
    ("ticket-slow", "ticket", 3 * DAY, 6 * H, 0.10),
)
WINDOWS = {"5m": 5 * M, "30m": 30 * M, "1h": H, "2h": 2 * H, "6h": 6 * H, "1d": DAY, "3d": 3 * DAY}
MIN_EVENTS = 10


@dataclass(frozen=True)
class World:
    store: Store
    settings: Settings
    events: dict[str, list[tuple[datetime, bool]]]  # per SLO: (ts, bad) of each event


def scenario(
    target_ms: int, seed: int = 42
) -> tuple[Scenario, dict[str, list[tuple[datetime, bool]]]]:
    """A session every 2 minutes for four days, each recalling once and observing three times:
    2% of observes fail all along, 50% in the burst hour; 0.5% of recalls fail; 2% of recalls
    are at or above the latency target, 60% in the slow hours (some exactly at it). Returns the
    events and, per SLO, each counted event's (ts, bad) as the spec defines them."""
    rnd = random.Random(seed)
    sc = Scenario()
    events: dict[str, list[tuple[datetime, bool]]] = {name: [] for name in OBJECTIVES}
    t = T0
    i = 0
    while t < END - 10 * M:
        start = t + rnd.randrange(0, 60) * S
        session = sc.session(f"s{i}").starts(start)
        recall_at = start + M
        slow_share = 0.6 if SLOW <= recall_at < SLOW + 4 * H else 0.02
        if rnd.random() < slow_share:
            latency = rnd.choice([target_ms, target_ms + rnd.randrange(1, 6000)])
        else:
            latency = rnd.randrange(100, target_ms)
        recall_fails = rnd.random() < 0.005
        session.recalls(recall_at, latency_ms=latency, fails=recall_fails)
        done = recall_at + timedelta(milliseconds=latency)
        events["recall_success"].append((done, recall_fails))
        if not recall_fails:
            events["recall_latency"].append((done, latency >= target_ms))
        for k in range(3):
            observe_at = start + 2 * M + k * 10 * S
            fail_share = 0.5 if BURST <= observe_at < BURST + H else 0.02
            fails = rnd.random() < fail_share
            session.observes(observe_at, fails=fails)
            events["observe_success"].append((observe_at + S, fails))
        t += 2 * M
        i += 1
    return sc, events


@pytest.fixture(scope="module")
def world(store: Store) -> World:
    """The scenario written to a table of its own, its four days backfilled into the ledger of
    a database of its own (30-day periods, so the period's coverage is 4/30)."""
    table = unique_table()
    settings = settings_for(table, {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}})
    target = next(c.target for c in configured_checks(settings) if c.id == "recall_latency_p95")
    sc, events = scenario(int(target))
    sc.write(store, table)
    backfill(store, settings, T0, END, now=END + DAY)
    return World(store, settings, events)


def floor(moment: datetime) -> datetime:
    return moment - (moment - EPOCH) % BUCKET


def oracle(name: str, events: list[tuple[datetime, bool]], at: datetime) -> dict[str, Any]:
    """Spec section 11 at `at`, literally: buckets of the judged range [T0, END) inside each
    window [at - w, at); burn, budget, coverage, tiers, status, time to exhaustion."""
    objective = OBJECTIVES[name]
    bad_share = 1 - objective
    buckets: dict[datetime, list[int]] = {}
    start = T0
    while start < END:  # the backfilled range: every bucket judged, empty or not
        buckets[start] = [0, 0]
        start += BUCKET
    for ts, bad in events:
        buckets[floor(ts)][1 if bad else 0] += 1

    def counts(length: timedelta) -> tuple[int, int]:
        inside = [v for s, v in buckets.items() if at - length <= s < at]
        return sum(v[0] for v in inside), sum(v[1] for v in inside)

    def burn(length: timedelta) -> float | None:
        good, bad = counts(length)
        return None if good + bad == 0 else (bad / (good + bad)) / bad_share

    good, bad = counts(PERIOD)
    total = good + bad
    judged = sum(1 for s in buckets if at - PERIOD <= s < at)
    allowed = bad_share * total
    remaining = None if total == 0 else 1 - bad / allowed
    tiers = []
    for tier, alert, long, short, share in TIERS:
        factor = share * PERIOD.total_seconds() / long.total_seconds()
        b_long, b_short = burn(long), burn(short)
        if b_long is not None and b_short is not None and b_long > factor and b_short > factor:
            state = "firing"
        elif b_long is None or b_short is None:
            state = "no_data"
        elif sum(counts(long)) < MIN_EVENTS:
            state = "insufficient_data"
        else:
            state = "ok"
        tiers.append((tier, alert, long, short, factor, state))
    if remaining is None:
        status = "no_data"
    elif remaining <= 0:
        status = "exhausted"
    elif allowed < 1:
        status = "too_few_events"
    else:
        status = "ok"
    burn_6h = burn(6 * H)
    if status == "exhausted":
        exhaustion: float | None = 0.0
    elif remaining is None or not burn_6h:
        exhaustion = None
    else:
        exhaustion = remaining * PERIOD.total_seconds() / burn_6h
    return {
        "objective": objective,
        "good": good,
        "bad": bad,
        "total": total,
        "coverage": judged / (PERIOD / BUCKET),
        "budget": {
            "allowed": allowed if total else None,
            "consumed": bad if total else None,
            "remaining": remaining,
        },
        "status": status,
        "burn": {label: burn(w) for label, w in WINDOWS.items()},
        "tiers": [
            {
                "name": tier,
                "alert": alert,
                "long": format_window(long),
                "short": format_window(short),
                "factor": factor,
                "state": state,
            }
            for tier, alert, long, short, factor, state in tiers
        ],
        "exhaustion_s": exhaustion,
    }


def format_window(length: timedelta) -> str:
    return next(label for label, w in WINDOWS.items() if w == length)


def flat(value: Any, path: str = "") -> dict[str, Any]:
    """A JSON value as path -> leaf, floats wrapped to compare tightly."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{path}[{i}]").items()}
    if isinstance(value, float):
        return {path: pytest.approx(value, rel=1e-12, abs=1e-12)}
    return {path: value}


def reported(world: World, at: datetime) -> dict[str, dict[str, Any]]:
    """The report's `slos` at `at`, as its JSON carries them."""
    return {name: r.to_json() for name, r in slo_reports(world.store, world.settings, at).items()}


@pytest.mark.parametrize("at", TIMES, ids=lambda t: t.strftime("%dd%Hh%Mm"))
def test_every_slo_figure_matches_the_oracle(world: World, at: datetime) -> None:
    """At each compared time, every figure of every built-in SLO is the spec's, computed apart."""
    assert_matches(reported(world, at), world, at)


def assert_matches(found: dict[str, dict[str, Any]], world: World, at: datetime) -> None:
    """Every figure of `found` (a report's `slos`) is the oracle's at `at`."""
    assert set(found) == set(OBJECTIVES)
    for name, events in world.events.items():
        got = {
            k: v
            for k, v in found[name].items()
            if k not in ("check", "sli", "period", "bucket", "at")
        }
        assert flat(got) == flat(oracle(name, events, at)), name


def test_the_json_report_carries_the_oracles_figures(world: World) -> None:
    """The `slos` of a run's JSON report at the end of day 4 are the oracle's, figure by figure."""
    report = run_once(world.store, world.settings, window_at(world.settings, END))
    assert_matches(report.to_json()["slos"], world, END)


def states(world: World, at: datetime, name: str) -> dict[str, str]:
    return {t["name"]: t["state"] for t in reported(world, at)[name]["tiers"]}


def test_the_burst_pages_observe_success(world: World) -> None:
    """Ten minutes and an hour into the burst, observe_success's page-fast tier fires; before
    it, no page tier does (the scenario is not vacuous)."""
    assert states(world, BURST + 10 * M, "observe_success")["page-fast"] == "firing"
    assert states(world, BURST + H, "observe_success")["page-fast"] == "firing"
    before = states(world, BURST, "observe_success")
    assert (before["page-fast"], before["page-slow"]) == ("ok", "ok")


def test_the_slow_burn_tickets_observe_success(world: World) -> None:
    """Before the burst, the steady 2% of failed observes fires the ticket-slow tier alone."""
    assert states(world, BURST, "observe_success") == {
        "page-fast": "ok",
        "page-slow": "ok",
        "ticket-fast": "ok",
        "ticket-slow": "firing",
    }


def test_the_slow_recalls_burn_recall_latency(world: World) -> None:
    """Amid the slow recalls of day 4, recall_latency burns far above 1 and a page tier fires;
    the first minutes hold too few recalls to judge a tier."""
    amid = reported(world, SLOW + 3 * H)["recall_latency"]
    assert amid["burn"]["6h"] > 6
    assert "firing" in {t["state"] for t in amid["tiers"] if t["alert"] == "page"}
    assert "insufficient_data" in states(world, T0 + 10 * M, "recall_success").values()
