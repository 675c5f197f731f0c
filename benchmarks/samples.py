"""Timing for the benchmarks: wall and CPU seconds of repeated runs, medians, ratios."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Samples:
    """Wall-clock seconds of repeated runs, and the CPU seconds of this process (engine included)."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "median_s": _round(self.median),
            "samples_s": [_round(s) for s in self.seconds],
        }
        if self.cpu:
            document["cpu_median_s"] = _round(self.cpu_median)
            document["cpu_samples_s"] = [_round(s) for s in self.cpu]
        return document


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(action: Callable[[], Any], samples: Samples | None = None) -> tuple[float, Any]:
    """Run `action`; its wall seconds (and CPU seconds, into `samples`)."""
    cpu, started = _cpu(), time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    if samples is not None:
        samples.seconds.append(seconds)
        samples.cpu.append(_cpu() - cpu)
    return seconds, result


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 2)


def _over_floor(case: dict[str, Any], path: str) -> float | None:
    return _ratio(case[path].median, case["floor"].median) if path in case else None
