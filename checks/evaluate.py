"""One evaluation: every configured check over one window, as a Report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from checks import deviation, events, sessions
from checks.base import CheckResult, DeviationCount, Report, Window
from checks.kinds import CheckSpec, DeviationContract, DeviationEvidence
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


def _grouped(specs: Sequence[CheckSpec]) -> dict[int | None, list[CheckSpec]]:
    """`specs` by window length (None: the configured window), in order."""
    groups: dict[int | None, list[CheckSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.window_ms, []).append(spec)
    return groups


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
    data_quality: dict[str, int] = {}
    for window_ms, group in _grouped(sessions.session_checks(enabled)).items():
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

    # So do the quantile, streak and share checks.
    for group in _grouped(events.window_checks(enabled)).values():
        started = time.time_ns()
        try:
            results.update(events.evaluate(store, source, _window_for(group[0], window), group))
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
            elif isinstance(spec.params, DeviationEvidence):
                results[spec.id] = deviation.evidence(
                    store, source, _window_for(spec, window), spec, spec.params.contract
                )
            else:
                raise TypeError(f"no evaluator for {spec.kind}")
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
