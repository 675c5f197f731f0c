"""Durations as the config writes them: `90s`, `15m`, `4h`, `1d`, `1h30m`."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DURATION_HINT = "a duration (e.g. 90s, 15m, 4h, 1d)"


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
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest round form of a duration: `4h`, `15m`, `90s`, `1d`."""
    total = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total and total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}s"


def _to_duration(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not {DURATION_HINT}")
    if isinstance(value, int | float):
        raise ValueError(f"{value!r} is not {DURATION_HINT}; write the unit, e.g. {value}s")
    return value


Duration = Annotated[timedelta, BeforeValidator(_to_duration)]
