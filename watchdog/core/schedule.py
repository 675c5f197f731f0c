"""When the daemon runs and which windows it judges: pure functions of the schedule and a time.

Windows are aligned to the schedule (`every` on the local wall clock of
`schedule.timezone` when it divides a day, else from the Unix epoch; or a
`cron` line), tile time with no gap or overlap across DST, and a run fires
`schedule.delay` after its window ends; catch-up is bounded by
`max_catchup` (docs/operations.md#catch-up-after-downtime, docs/configuration.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from watchdog.core.cron import CronLine
from watchdog.core.durations import format_duration
from watchdog.core.settings import ScheduleSettings

DAY_S = 86400
# Each probe crosses at most one UTC offset change; real zones change far less often.
_MAX_OFFSET_HOPS = 8
_MAX_CRON_PROBES = 64
# Counting missed windows walks them; beyond this many we say "more than".
COUNT_CAP = 1_000_000


def _epoch_s(moment: datetime) -> int:
    """Whole epoch seconds at or before `moment` (aware)."""
    return math.floor(moment.timestamp())


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


@dataclass(frozen=True)
class Schedule:
    """The aligned window ends of `schedule.every` or `schedule.cron` in a time zone."""

    every_s: int | None
    cron: str | None
    timezone: str
    delay: timedelta
    _cron_line: CronLine | None = field(default=None, compare=False, repr=False)

    @classmethod
    @lru_cache(maxsize=16)
    def from_settings(cls, settings: ScheduleSettings) -> Schedule:
        """The schedule of validated settings (the cron line and `every` were checked at load)."""
        if settings.cron is not None:
            line = CronLine.parse(settings.cron, settings.timezone)
            return cls(None, settings.cron, settings.timezone, settings.delay, line)
        return cls(int(settings.period.total_seconds()), None, settings.timezone, settings.delay)

    # -- the grid -------------------------------------------------------------

    @property
    def _local_grid(self) -> bool:
        return self.every_s is not None and DAY_S % self.every_s == 0

    def _offset(self, seconds: int) -> int:
        """The UTC offset (seconds) in force at epoch second `seconds` on the grid's clock."""
        if not self._local_grid:
            return 0
        offset = datetime.fromtimestamp(seconds, tz=ZoneInfo(self.timezone)).utcoffset()
        return int(offset.total_seconds()) if offset is not None else 0

    def _first_change(self, lo: int, hi: int) -> int:
        """The first second in (lo, hi] whose offset differs from lo's (one exists)."""
        base = self._offset(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset(mid) == base:
                lo = mid
            else:
                hi = mid
        return hi

    def _every_after(self, after: int) -> int:
        """The smallest end > `after` (epoch seconds) of an `every` schedule."""
        assert self.every_s is not None
        every, s = self.every_s, after
        for _ in range(_MAX_OFFSET_HOPS):
            offset = self._offset(s + 1)
            candidate = s + 1 + (-(s + 1 + offset)) % every
            if self._offset(candidate) == offset:
                return candidate
            s = self._first_change(s + 1, candidate) - 1
        raise RuntimeError(f"no window end found after {_utc(after)} in {self.timezone}")

    def _every_at_or_before(self, until: int) -> int:
        """The largest end <= `until` (epoch seconds) of an `every` schedule."""
        assert self.every_s is not None
        every, s = self.every_s, until
        for _ in range(_MAX_OFFSET_HOPS):
            offset = self._offset(s)
            candidate = s - (s + offset) % every
            if self._offset(candidate) == offset:
                return candidate
            # The offset changed in (candidate, s]: no end of this offset before the change.
            s = self._first_change(candidate, s) - 1
        raise RuntimeError(f"no window end found before {_utc(until)} in {self.timezone}")

    def _cron_at_or_after(self, moment: datetime) -> datetime:
        fire = self._cron_line.at_or_after(moment) if self._cron_line is not None else None
        if fire is None:
            raise RuntimeError(f"cron {self.cron!r} has no fire time after {moment}")
        return fire

    def _cron_after(self, after: datetime) -> datetime:
        # Probe from the next whole second: CronTrigger works in whole seconds and,
        # inside a repeated hour, returns the same time again for a sub-second step.
        probe = _utc(_epoch_s(after) + 1)
        for _ in range(_MAX_CRON_PROBES):
            fire = self._cron_at_or_after(probe)
            if fire > after:
                return fire
            probe += timedelta(seconds=1)
        raise RuntimeError(f"cron {self.cron!r} has no fire time after {after}")

    # -- the public functions -------------------------------------------------

    def next_end(self, after: datetime) -> datetime:
        """The first window end strictly after `after`."""
        if self.cron is not None:
            return self._cron_after(after)
        return _utc(self._every_after(_epoch_s(after)))

    def last_end(self, until: datetime) -> datetime:
        """The last window end at or before `until`."""
        if self.cron is None:
            return _utc(self._every_at_or_before(_epoch_s(until)))
        # Cron cannot step backwards: find any end before `until`, then walk forward.
        span = timedelta(minutes=1)
        for _ in range(_MAX_CRON_PROBES):
            first = self._cron_at_or_after(until - span)
            if first <= until:
                for _ in range(COUNT_CAP):
                    following = self._cron_after(first)
                    if following > until:
                        return first
                    first = following
                break
            span *= 2
        raise RuntimeError(f"cron {self.cron!r} has no fire time before {until}")

    def previous_end(self, end: datetime) -> datetime:
        """The window end just before `end`: where the window ending at `end` starts."""
        return self.last_end(end - timedelta(microseconds=1))

    def length_before(self, at: datetime) -> timedelta:
        """How long the window ending at the last window end at or before `at` is: the
        length of a window ending at `at` (a window is one schedule period long)."""
        end = self.last_end(at)
        return end - self.previous_end(end)

    def window_bounds(self, end: datetime) -> tuple[datetime, datetime]:
        """The aligned window `[start, end)` that ends at `end`."""
        return self.previous_end(end), end

    def due_end(self, now: datetime) -> datetime:
        """The end of the latest window whose run is due at `now` (end + delay <= now)."""
        return self.last_end(now - self.delay)

    def next_run(self, now: datetime) -> datetime:
        """When the next run is due after `now`: the next window end plus the delay."""
        return self.next_end(now - self.delay) + self.delay

    def ends_between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Up to `limit` window ends in (after, until], oldest first."""
        ends: list[datetime] = []
        end = self.next_end(after)
        while end <= until and len(ends) < limit:
            ends.append(end)
            end = self.next_end(end)
        return ends

    def count_between(self, after: datetime, until: datetime, cap: int = COUNT_CAP) -> int:
        """How many window ends lie in (after, until], counting at most `cap`."""
        count, end = 0, self.next_end(after)
        while end <= until and count < cap:
            count += 1
            end = self.next_end(end)
        return count

    def describe(self) -> str:
        """The schedule in config words, e.g. `every 4h (Europe/Berlin), delay 2m`."""
        what = (
            f"cron {self.cron!r}"
            if self.cron is not None
            else f"every {format_duration(timedelta(seconds=self.every_s or 0))}"
        )
        return f"{what} ({self.timezone}), delay {format_duration(self.delay)}"


@dataclass(frozen=True)
class CatchUp:
    """The windows a daemon judges now: missed ones first, oldest first, then the due one."""

    ends: tuple[datetime, ...]
    skipped: int  # missed windows beyond max_catchup, the oldest ones; not judged
    skipped_from: datetime | None = None  # end of the first skipped window
    skipped_to: datetime | None = None  # end of the last skipped window
    skipped_capped: bool = False  # `skipped` stopped counting at COUNT_CAP


def catch_up(
    schedule: Schedule, last_judged: datetime | None, now: datetime, max_catchup: int
) -> CatchUp:
    """Every window due since `last_judged` (its end), bounded by max_catchup plus the due one.

    With no run log yet, only the window due now. When more windows are
    missed than max_catchup allows, the newest ones are judged (the current
    alert state is what matters) and the oldest are skipped and counted.
    """
    due = schedule.due_end(now)
    if last_judged is None:
        return CatchUp(ends=(due,), skipped=0)
    if due <= last_judged:
        return CatchUp(ends=(), skipped=0)
    keep = max_catchup + 1  # the missed ones, plus the window due now
    newest: list[datetime] = [due]
    while len(newest) < keep:
        before = schedule.previous_end(newest[-1])
        if before <= last_judged:
            break
        newest.append(before)
    newest.reverse()
    oldest_kept = newest[0]
    first_missed = schedule.next_end(last_judged)
    if first_missed >= oldest_kept:
        return CatchUp(ends=tuple(newest), skipped=0)
    skipped = schedule.count_between(last_judged, schedule.previous_end(oldest_kept))
    return CatchUp(
        ends=tuple(newest),
        skipped=skipped,
        skipped_from=first_missed,
        skipped_to=schedule.previous_end(oldest_kept),
        skipped_capped=skipped >= COUNT_CAP,
    )
