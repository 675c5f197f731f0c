"""The APScheduler side of the daemon: a trigger on the aligned schedule, its grace, its end.

watchdog.core.schedule knows which windows end when; this fires the daemon's job
`schedule.delay` after each of them (APScheduler 3), and still runs one that fires late by at
most `schedule.misfire_grace` (docs/operations.md#the-daemon).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from apscheduler.triggers.base import BaseTrigger

from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings

log = logging.getLogger(__name__)

_ONE_US = timedelta(microseconds=1)


class AlignedTrigger(BaseTrigger):  # type: ignore[misc]
    """Fires `schedule.delay` after each aligned window end (APScheduler 3 trigger)."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The first fire time after the previous one (or at/after `now` for the first)."""
        delay = self.schedule.delay
        if previous_fire_time is None:
            return self.schedule.next_end(now - delay - _ONE_US) + delay
        return self.schedule.next_end(previous_fire_time - delay) + delay

    def __str__(self) -> str:
        return f"aligned[{self.schedule.describe()}]"


def misfire_grace(settings: Settings) -> int:
    """APScheduler's misfire grace time: `schedule.misfire_grace` in whole seconds, at least 1."""
    return max(1, int(settings.schedule.misfire_grace.total_seconds()))


def shutdown_scheduler(scheduler: Any) -> None:
    """Stop the scheduler without waiting for its job; never raises."""
    try:
        scheduler.shutdown(wait=False)
    except Exception as exc:  # not running yet, or already stopped
        log.debug("scheduler shutdown: %s", exc)
