"""Times as the watchdog writes and reads them: RFC 3339 UTC, epoch milliseconds, the clock.

A time `parse_time` accepts lies between 1971-01-01 and 2262-01-01, what ClickHouse's
`DateTime64` columns hold with a lookback before it (docs/spec.md#7-command-line).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Evaluation times the store can represent with a lookback of up to ten years before them
# (ClickHouse's DateTime64 spans 1900-2299; nanosecond columns end in April 2262).
EARLIEST = datetime(1971, 1, 1, tzinfo=UTC)
LATEST = datetime(2262, 1, 1, tzinfo=UTC)
# How far ahead of this host's clock another host's may run: beyond it, a time is "the future".
CLOCK_SKEW = timedelta(minutes=5)


def system_clock() -> datetime:
    """The wall clock, aware, in UTC."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with `Z`, milliseconds only when present."""
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def to_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return _EPOCH + timedelta(milliseconds=ms)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with its zone (2026-11-28T04:00:00Z) the store can hold; ValueError else."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time (e.g. 2026-11-28T04:00:00Z)") from None
    if moment.tzinfo is None:  # the example is a valid time: `2026-11-28Z` is not one
        raise ValueError(f"{text!r} has no time zone (e.g. {rfc3339(moment.replace(tzinfo=UTC))})")
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 shifted by its offset leaves datetime's range
        utc = None
    if utc is None or not EARLIEST <= utc < LATEST:
        raise ValueError(
            f"{text!r} is outside the times the store can hold"
            f" ({rfc3339(EARLIEST)} to {rfc3339(LATEST)})"
        )
    return utc
