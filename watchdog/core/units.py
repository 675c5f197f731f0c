"""What a check's value measures, and its target as the config writes it: `5%`, `3s`, `4h`, `0.05`.

A target is a bare number in the check's own unit (a rate's fraction, a latency's milliseconds,
a freshness's seconds, a count) or, for rates and shares, a percentage, and for latencies and
freshness, a duration (docs/configuration.md#targets-with-their-units). A rate written above 1
without `%` is refused, naming what was probably meant: `target = 5` is 500%, which no rate
reaches, so the check could never breach.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Annotated

from pydantic import AfterValidator

from watchdog.core.durations import DURATION_HINT, parse_duration


class Unit(enum.StrEnum):
    """What a check's value counts or measures."""

    COUNT = "count"
    RATIO = "ratio"
    MS = "ms"
    S = "s"


_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")
TARGET_HINT = 'a number, a percentage ("5%") or a duration ("3s")'


def _target_text(value: float | str) -> float | str:
    """A target as written: a finite number, a percentage or a duration (which one fits is the
    check's unit: `target_value`)."""
    if isinstance(value, str):
        if _PERCENT.fullmatch(value) is None:
            try:
                parse_duration(value)
            except ValueError:
                raise ValueError(f"{value!r} is not a target ({TARGET_HINT})") from None
    elif not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return value


# A `target` key: checked when the config loads, then read in its check's unit by `target_value`.
TargetText = Annotated[float | str, AfterValidator(_target_text)]


def target_value(written: float | str, unit: Unit) -> float:
    """The target `written` in `unit` (a rate's fraction, milliseconds, seconds, a count).

    ValueError, in words that say what to write instead, when it does not fit the unit.
    """
    if not isinstance(written, str):
        if unit is Unit.RATIO and written > 1:
            return _refuse_rate(written)
        return float(written)
    percent = _PERCENT.fullmatch(written)
    if unit is Unit.RATIO:
        if percent is None:
            raise ValueError(
                f'{written!r}: a rate is a fraction (0.05) or a percentage ("5%"), not a duration'
            )
        share = float(percent.group(1))
        if share > 100:
            raise ValueError(f"{written!r}: a rate is 0% to 100%")
        return share / 100
    if unit is Unit.COUNT:
        raise ValueError(f"{written!r}: this check counts; its target is a number (e.g. 3)")
    if percent is not None:
        what = "milliseconds" if unit is Unit.MS else "seconds"
        raise ValueError(
            f"{written!r}: a percentage is for rates; this check's target is {DURATION_HINT},"
            f" or a number of {what}"
        )
    seconds = parse_duration(written).total_seconds()
    return round(seconds * 1000, 3) if unit is Unit.MS else seconds


def _refuse_rate(written: float) -> float:
    """A bare rate above 1: never reached, so refused, saying what was probably meant."""
    raise ValueError(
        f"{written:g} is {written * 100:g}%: a rate is 0..1;"
        f' did you mean "{written:g}%" ({written / 100:g})?'
    )
