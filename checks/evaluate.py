"""One evaluation: every configured check over one window, as a Report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from checks import deviation, events, sessions
from checks.base import CheckResult, DeviationCount, Report, Window
from checks.kinds import (
    CheckSpec,
    DeviationContract,
    DeviationEvidence,
    Quantile,
    Share,
    Streak,
)
from checks.sources import CompiledSource
from checks.verdict import disabled, errored
from watchdog.errors import StoreError
from watchdog.store import Store

log = logging.getLogger(__name__)

# Told the check ids one query judged and when it ran (epoch ns); the daemon's check spans.
QueryTimer = Callable[[Sequence[str], int, int], None]


def _window_for(spec: CheckSpec, window: Window) -> Window:
    if spec.window_ms is None:
        return window
    return replace(window, length=timedelta(milliseconds=spec.window_ms))


def _single(store: Store, source: CompiledSource, window: Window, spec: CheckSpec) -> CheckResult:
    """Evaluate one check that has a query of its own."""
    p = spec.params
    if isinstance(p, Quantile):
        return events.quantile(store, source, window, spec, p)
    if isinstance(p, Streak):
        return events.streak(store, source, window, spec, p)
    if isinstance(p, Share):
        return events.share(store, source, window, spec, p)
    if isinstance(p, DeviationEvidence):
        return deviation.evidence(store, source, window, spec, p.contract)
    raise TypeError(f"no evaluator for {spec.kind}")


def evaluate(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    *,
    timed: QueryTimer | None = None,
) -> Report:
    """Judge every check in `specs` over `window` on `source`, each error contained.

    A store error inside one query turns the checks of that query into
    `error` results; it never aborts the others. `timed`, when given, is
    told how long each query took and which checks it judged.
    """
    results: dict[str, CheckResult] = {}
    deviations: tuple[DeviationCount, ...] = ()
    enabled = [s for s in specs if s.enabled]

    # The session checks share one query per distinct window length.
    by_window: dict[int | None, list[CheckSpec]] = {}
    for spec in sessions.session_checks(enabled):
        by_window.setdefault(spec.window_ms, []).append(spec)
    data_quality: dict[str, int] = {}
    for window_ms, group in by_window.items():
        started = time.time_ns()
        try:
            shared = sessions.evaluate(store, source, _window_for(group[0], window), group)
            results.update(shared.results)
            if window_ms is None:
                data_quality = shared.data_quality
        except StoreError as exc:
            _log_error(group, exc)
            results.update({spec.id: errored(spec, exc.problem) for spec in group})
        if timed is not None:
            timed([spec.id for spec in group], started, time.time_ns())

    for spec in enabled:
        if spec.id in results:
            continue
        started = time.time_ns()
        try:
            if isinstance(spec.params, DeviationContract):
                found = deviation.contract(
                    store, source, _window_for(spec, window), spec, spec.params
                )
                results[spec.id], deviations = found.contract, found.aggregation
            else:
                results[spec.id] = _single(store, source, _window_for(spec, window), spec)
        except StoreError as exc:
            _log_error([spec], exc)
            results[spec.id] = errored(spec, exc.problem)
        if timed is not None:
            timed([spec.id], started, time.time_ns())

    ordered = {spec.id: results.get(spec.id) or disabled(spec) for spec in specs}
    return Report(
        window=window,
        source=source.name,
        checks=ordered,
        deviations=deviations,
        data_quality=data_quality,
    )


def _log_error(specs: Sequence[CheckSpec], exc: StoreError) -> None:
    log.warning("checks %s could not run: %s", ", ".join(s.id for s in specs), exc.problem)
