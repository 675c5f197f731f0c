"""The daemon's burn tick: at every bucket close (+ `schedule.delay`), apart from the schedule's
windows, judge the closed buckets into the ledger, read each SLO's figures, advance its two
alerts and hand the figures back for `/metrics` (docs/slo.md#the-burn-tick).

Every tick of the daemon does this step too (a window end is a bucket boundary), and a burn
tick judged at a time already judged changes nothing: the alerts are judged at the bucket
boundary, not at the wall clock, so a restart or a window tick at the same boundary sends
nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from apscheduler.triggers.base import BaseTrigger

from alerts.base import Notifier, Timer
from alerts.pipeline import ProcessOutcome
from alerts.rows import SloBucketRow
from alerts.slo import SloJudgement, process_slos
from alerts.state import load_ledger
from checks.builtin import configured_checks
from checks.slo.budget import WINDOWS, Bucket, SloFigures, bucket_floor
from checks.slo.specs import slo_specs
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import Clock
from watchdog.runner.slo import catch_up, slo_reports, with_bad_events

log = logging.getLogger(__name__)

_ONE_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class SloBurn:
    """One SLO after a burn step: its figures at the bucket boundary, and the buckets judged
    since the daemon started that it had not counted yet (for `slo_events_total`)."""

    name: str
    figures: SloFigures
    judged: tuple[Bucket, ...] = ()


@dataclass(frozen=True)
class Burned:
    """What a burn step did: the boundary it judged at, each SLO, the alert pipeline's run."""

    at: datetime
    slos: tuple[SloBurn, ...]
    outcome: ProcessOutcome | None = None


def burn_at(settings: Settings, now: datetime) -> datetime:
    """The newest bucket boundary whose bucket closed `schedule.delay` ago or more."""
    return bucket_floor(now - settings.schedule.delay, settings.slo.bucket)


@dataclass(frozen=True)
class BurnStep:
    """What the burn step runs with: the clock, the receivers, the delivery and the lease's
    checkpoint, and what the daemon has counted of the ledger so far."""

    clock: Clock
    notifiers: Mapping[str, Notifier]
    timer: Timer | None = None
    guard: Any = None  # alerts.lease.Guard: LeaseLost when another process took the lease
    deliver: bool = True
    started: datetime | None = None  # the daemon's start: buckets judged since are counted
    counted: Mapping[str, datetime] | None = None  # per SLO, the newest bucket counted


def burn(store: Store, settings: Settings, now: datetime, step: BurnStep) -> Burned | None:
    """Judge the buckets closed by `now` (the ledger's catch-up), then each SLO's figures at
    that boundary, and advance the SLO alerts there; None when no SLO is enabled.

    A StoreError goes to the caller (the tick ends as the store being down).
    """
    specs = slo_specs(settings, configured_checks(settings))
    if not specs:
        return None
    at = burn_at(settings, now)
    catch_up(store, settings, at, now)
    source, counted = settings.source.display_name, step.counted or {}
    names = [s.name for s in specs]
    reports = slo_reports(store, settings, at)  # at is a bucket boundary: the figures there
    # The buckets judged since the daemon started that it has not counted (slo_events_total):
    # those after the newest counted one, a few once the first tick has counted the rest.
    fresh: list[SloBucketRow] = []
    if step.started is not None:
        reach = max(max(s.params.period for s in specs), max(WINDOWS.values()))
        since = min((counted.get(n, at - reach) for n in names), default=at - reach)
        ledger = load_ledger(store, settings, source, names, since, at) or {}
        started = step.started
        fresh = [r for rows in ledger.values() for r in rows if r.judged_at >= started]
    judgements, slos = [], []
    for spec in specs:
        found = reports[spec.name].figures
        after = counted.get(spec.name)
        new = tuple(
            Bucket(r.start, r.good, r.bad)
            for r in fresh
            if r.slo == spec.name and (after is None or r.start > after)
        )
        judgements.append(SloJudgement(spec, found))
        slos.append(SloBurn(spec.name, found, new))
    outcome = process_slos(
        store,
        settings,
        with_bad_events(store, settings, judgements),
        now=step.clock(),
        notifiers=step.notifiers,
        timer=step.timer,
        guard=step.guard,
        deliver=step.deliver,
    )
    return Burned(at, tuple(slos), outcome)


class BucketTrigger(BaseTrigger):  # type: ignore[misc]
    """Fires `delay` after each bucket boundary (APScheduler 3 trigger): the burn tick."""

    def __init__(self, bucket: timedelta, delay: timedelta) -> None:
        self.bucket, self.delay = bucket, delay

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The first boundary + delay after the previous fire (or at/after `now` for the first)."""
        after = previous_fire_time if previous_fire_time is not None else now - _ONE_US
        return bucket_floor(after - self.delay, self.bucket) + self.bucket + self.delay

    def __str__(self) -> str:
        return f"buckets[{self.bucket}+{self.delay}]"
