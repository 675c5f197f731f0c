"""A crontab line, parsed once: the config check, the daemon's schedule and Alertmanager's
refresh horizon all read its fire times through `CronLine`.

APScheduler's `CronTrigger` does the parsing and the calendar; it is imported only when a
cron line is used (an `every` schedule never loads it). The schedule: docs/operations.md#the-daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class CronLine:
    """A crontab line in a time zone: its fire times at or after a moment."""

    line: str
    timezone: str = "UTC"
    _trigger: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, line: str, timezone: str = "UTC") -> CronLine:
        """The line's fire times; ValueError (naming it and the form) when it is not a crontab
        line or never fires (`0 0 31 2 *`)."""
        from apscheduler.triggers.cron import CronTrigger  # deferred: only configs with a cron

        zone: tzinfo = UTC if timezone == "UTC" else ZoneInfo(timezone)
        try:
            trigger = CronTrigger.from_crontab(line, timezone=zone)
        except ValueError as exc:
            raise ValueError(
                f"{line!r} is not a crontab line (e.g. '0 */4 * * *'): {exc}"
            ) from None
        parsed = cls(line, timezone, trigger)
        if parsed.at_or_after(datetime(2000, 1, 1, tzinfo=UTC)) is None:
            raise ValueError(f"{line!r} never fires (no such date)")
        return parsed

    def at_or_after(self, moment: datetime) -> datetime | None:
        """The first fire time at or after `moment` (aware, in UTC), None when there is none."""
        fire: datetime | None = self._trigger.get_next_fire_time(None, moment)
        return None if fire is None else fire.astimezone(UTC)

    def after(self, previous: datetime) -> datetime | None:
        """The fire time following the fire time `previous` (APScheduler's own stepping)."""
        fire: datetime | None = self._trigger.get_next_fire_time(
            previous, previous + timedelta(seconds=1)
        )
        return None if fire is None else fire.astimezone(UTC)

    def gaps(self, fallback: timedelta) -> tuple[timedelta, timedelta]:
        """The shortest and the longest gap between consecutive fire times over a year (or
        its first 1,000 runs when it runs more often); `fallback` when it has fewer than two."""
        moment = datetime(2001, 1, 1, tzinfo=UTC)
        end, seen = moment + timedelta(days=366), []
        previous = self.at_or_after(moment)
        for _ in range(1000):
            if previous is None or previous >= end:
                break
            following = self.after(previous)
            if following is None:
                break
            seen.append(following - previous)
            previous = following
        return (min(seen), max(seen)) if seen else (fallback, fallback)
