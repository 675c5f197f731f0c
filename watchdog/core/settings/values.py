"""Typed config values checked when the config loads: time zones, finite numbers, crontab lines."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
    return value


TimeZone = Annotated[str, AfterValidator(_timezone)]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return value


FiniteFloat = Annotated[float, AfterValidator(_finite)]


def _crontab(value: str) -> str:
    """A crontab line APScheduler can parse and that fires at all (`0 0 31 2 *` never does)."""
    from apscheduler.triggers.cron import CronTrigger  # deferred: only configs with a cron

    try:
        trigger = CronTrigger.from_crontab(value, timezone=UTC)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a crontab line (e.g. '0 */4 * * *'): {exc}") from None
    if trigger.get_next_fire_time(None, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise ValueError(f"{value!r} never fires (no such date)")
    return value


Crontab = Annotated[str, AfterValidator(_crontab)]
