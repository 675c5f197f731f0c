"""Durations: as the config and flags write them (`90s`, `15m`, `4h`, `1d`, `1h30m`), and for people.

Every duration is at most `3650d` (`MAX_DURATION`); a bad one is one line naming what is
accepted (docs/configuration.md#validation).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DURATION_HINT = "a duration (e.g. 90s, 15m, 4h, 1d)"
# The longest duration anything accepts: windows, lookbacks and periods stay far inside
# what ClickHouse's DateTime64 and the schedule can represent.
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: str) -> timedelta:
    """Parse `90s`, `15m`, `4h`, `1d`, `1h30m` into a timedelta; ValueError otherwise."""
    compact = text.strip().replace(" ", "")
    if not compact:
        raise ValueError(f"{text!r} is not {DURATION_HINT}")
    pos, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(compact):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(compact):
        raise ValueError(f"{text!r} is not {DURATION_HINT}")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(
            f"{_shown(text)} is longer than {format_duration(MAX_DURATION)},"
            " the longest duration accepted"
        )
    return timedelta(seconds=seconds)


def _shown(text: str) -> str:
    """A value quoted for an error line, cut when it is long."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def format_duration(value: timedelta) -> str:
    """The shortest round form of a duration, as the config writes it: `4h`, `15m`, `90s`, `1d`.

    Exact to the millisecond (`1500ms`), so that what it writes parses back the same.
    """
    total = duration_ms(value)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if total and total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}ms" if total else "0s"


def format_ms(ms: int) -> str:
    """A duration in milliseconds as config writes it: 5m, 1h30m (a kind's parameters)."""
    return format_duration(timedelta(milliseconds=ms))


def human_duration(seconds: float) -> str:
    """A duration for people, its two largest units: 45s, 1m30s, 12m30s, 4h, 3h57m, 2d4h."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    parts: list[tuple[int, str]] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount or parts:
            parts.append((amount, unit))
    shown = parts[:2]
    while len(shown) > 1 and shown[-1][0] == 0:
        shown.pop()
    return "".join(f"{amount}{unit}" for amount, unit in shown)


def duration_ms(value: timedelta) -> int:
    """A duration in whole milliseconds (what queries bind)."""
    return value // timedelta(milliseconds=1)


def _to_duration(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not {DURATION_HINT}")
    if isinstance(value, int | float):
        raise ValueError(f"{value!r} is not {DURATION_HINT}; write the unit, e.g. {value}s")
    return value


# Read as the config writes durations; written back (JSON) the same way.
Duration = Annotated[
    timedelta,
    BeforeValidator(_to_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
