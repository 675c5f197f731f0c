"""Times as the watchdog writes and reads them: RFC 3339 UTC, epoch milliseconds, the clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
