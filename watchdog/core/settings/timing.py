"""`[window]` and `[schedule]`: when the daemon runs, and the windows every command judges.

The window's length is the schedule's period (docs/spec.md section 4): one value, not two.
`window.length` may be left out (it follows the schedule) or written equal to it; a
length that disagrees is refused (`window_problems`), so `check`, `backtest` and the
daemon judge the same windows.
"""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from pydantic import Field, field_validator, model_validator

from watchdog.core.cron import CronLine
from watchdog.core.durations import Duration, format_duration
from watchdog.core.errors import ConfigError
from watchdog.core.settings.values import ConfigModel, Crontab, TimeZone


class WindowSettings(ConfigModel):
    # Written only to state it: the window's length is the schedule's (`window_problems`).
    length: Duration | None = None
    lookback: Duration = timedelta(hours=24)
    recall_grace: Duration = timedelta(minutes=5)
    observe_grace: Duration = timedelta(minutes=15)
    idle_timeout: Duration = timedelta(hours=6)

    @model_validator(mode="after")
    def _positive(self) -> WindowSettings:
        for key in ("length", "lookback", "idle_timeout"):
            value = getattr(self, key)
            if value is not None and value <= timedelta(0):
                raise ValueError(f"{key} must be positive")
        return self

    def need(self, length: timedelta) -> timedelta:
        """What a window of `length` must read back to judge every obligation due in it."""
        return length + max(self.idle_timeout, self.recall_grace, self.observe_grace)

    def reach(self, length: timedelta) -> timedelta:
        """How far back a window of `length` reads: the lookback, or further when it needs to."""
        return max(self.lookback, self.need(length))


class ScheduleSettings(ConfigModel):
    every: Duration | None = None
    cron: Crontab | None = None
    timezone: TimeZone = "UTC"
    delay: Duration = timedelta(minutes=2)
    max_catchup: int = Field(default=6, ge=0)
    misfire_grace: Duration = timedelta(minutes=30)

    @field_validator("every")
    @classmethod
    def _whole_seconds(cls, value: timedelta | None) -> timedelta | None:
        if value is not None:
            seconds = value.total_seconds()
            if seconds < 1 or not seconds.is_integer():
                raise ValueError("must be a whole number of seconds, at least 1s")
        return value

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleSettings:
        if self.every is not None and self.cron is not None:
            raise ValueError("set either every or cron, not both")
        # A run fires `delay` after its window ends: within the period, so runs keep order.
        limit = min(self.period, timedelta(days=1)) if self.cron is None else timedelta(days=1)
        if self.delay >= limit:
            raise ValueError(
                f"delay {format_duration(self.delay)} must be shorter than"
                f" {format_duration(limit)} (the period, at most 1d)"
            )
        if self.misfire_grace <= timedelta(0):
            raise ValueError("misfire_grace must be positive")
        return self

    @property
    def period(self) -> timedelta:
        """The schedule's period when it is `every` (default 4h)."""
        return self.every if self.every is not None else timedelta(hours=4)

    def gaps(self) -> tuple[timedelta, timedelta]:
        """The shortest and the longest window: the period for `every`, the cron line's
        shortest and longest gap between fire times (over a year) for `cron`."""
        if self.cron is None:
            return self.period, self.period
        return _cron_gaps(self.cron, self.timezone)

    @property
    def said(self) -> str:
        """The schedule as the config writes it, e.g. `schedule.every = '4h'`."""
        if self.cron is not None:
            return f"schedule.cron = {self.cron!r}"
        return f"schedule.every = {format_duration(self.period)!r}"


@lru_cache(maxsize=32)
def _cron_gaps(line: str, timezone: str) -> tuple[timedelta, timedelta]:
    """A cron line's shortest and longest gap (walking a year of it once per line)."""
    return CronLine.parse(line, timezone).gaps(timedelta(hours=4))


def window_problems(window: WindowSettings, schedule: ScheduleSettings) -> list[ConfigError]:
    """What is wrong with `[window]` beside `[schedule]`: a written length that is not the
    schedule's period, a written lookback too short for the longest window's obligations."""
    shortest, longest = schedule.gaps()
    problems: list[ConfigError] = []
    if window.length is not None and not window.length == shortest == longest:
        said = schedule.said
        if schedule.cron is not None:
            spans = (format_duration(shortest), format_duration(longest))
            said += f": windows of {spans[0]}" + (f" to {spans[1]}" if longest != shortest else "")
        problems.append(
            ConfigError(
                "window.length",
                f"{format_duration(window.length)} is not the schedule's period ({said});"
                " every window is one schedule period long: remove window.length"
                " (it follows the schedule) or change the schedule",
            )
        )
    if "lookback" in window.model_fields_set and window.lookback < window.need(longest):
        problems.append(
            ConfigError(
                "window",
                f"lookback {format_duration(window.lookback)} is too short to judge the"
                " obligations due in a window: it must be at least the window (the schedule's"
                f" period, {format_duration(longest)}) + the longest of idle_timeout and the"
                f" graces ({format_duration(window.need(longest))})",
            )
        )
    return problems
