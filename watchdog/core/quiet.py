"""Recurring quiet hours: a daily local-time range in which non-critical notifications wait.

Judged on the local wall clock of its time zone; which messages wait is the outbox's
(docs/alerts.md#quiet-hours).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

_CLOCK_RANGE = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")
QUIET_HOURS_HINT = "a daily range HH:MM-HH:MM, e.g. 22:00-07:00"


def parse_quiet_hours(text: str) -> tuple[time, time]:
    """`22:00-07:00` -> (22:00, 07:00); the range may wrap midnight. ValueError otherwise."""
    match = _CLOCK_RANGE.fullmatch(text.strip().replace(" ", ""))
    if not match:
        raise ValueError(f"{text!r} is not {QUIET_HOURS_HINT}")
    hour1, minute1, hour2, minute2 = (int(g) for g in match.groups())
    start, end = time(hour1, minute1), time(hour2, minute2)
    if start == end:
        raise ValueError(f"{text!r} is empty: start and end are the same time")
    return start, end


@dataclass(frozen=True)
class QuietHours:
    """`22:00-07:00` in a time zone; the range may wrap midnight, the end is exclusive."""

    start: time
    end: time
    timezone: str = "UTC"

    @classmethod
    def parse(cls, text: str, timezone: str = "UTC") -> QuietHours:
        start, end = parse_quiet_hours(text)
        return cls(start, end, timezone)

    def _local(self, now: datetime) -> datetime:
        return now.astimezone(ZoneInfo(self.timezone))

    def active(self, now: datetime) -> bool:
        """Whether `now` falls inside the quiet range (local wall time)."""
        clock = self._local(now).time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= clock < self.end
        return clock >= self.start or clock < self.end

    def ends_after(self, now: datetime) -> datetime:
        """The first end of the quiet range at or after `now`, in UTC."""
        local = self._local(now)
        for days in range(0, 3):
            day = (local + timedelta(days=days)).date()
            candidate = datetime.combine(day, self.end, tzinfo=ZoneInfo(self.timezone))
            if candidate >= local:
                return candidate.astimezone(UTC)
        raise AssertionError("unreachable: a daily range ends within two days")

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M} {self.timezone}"
