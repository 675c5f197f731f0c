"""One evaluation: every configured check over one window, as a Report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from checks import deviation, events, sessions, state
from checks.base import CheckResult, DeviationCount, Report, Status, Window
from checks.breakdown import Triage
from checks.kinds import CheckSpec, DeviationContract, DeviationEvidence
from checks.sources import CompiledSource
from checks.verdict import disabled, errored
from watchdog.core.errors import StoreError
from watchdog.core.store import Store

log = logging.getLogger(__name__)

# Told the check ids one query judged and when it ran (epoch ns); the daemon's check spans.
QueryTimer = Callable[[Sequence[str], int, int], None]


# Judges one group of checks over its window with one query: their results by id.
Judge = Callable[[Window, list[CheckSpec]], dict[str, CheckResult]]


def _grouped(specs: Sequence[CheckSpec]) -> list[list[CheckSpec]]:
    """`specs` grouped by window length (None: the configured window), in order."""
    groups: dict[int | None, list[CheckSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.window_ms, []).append(spec)
    return list(groups.values())


def evaluate(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    *,
    timed: QueryTimer | None = None,
    dims: Sequence[str] | None = None,
) -> Report:
    """Judge every check in `specs` over `window` on `source`, each error contained.

    A store error inside one query turns the checks of that query into
    `error` results; it never aborts the others. `timed`, when given, is
    told how long each query took and which checks it judged. With `dims`
    (triage dimensions without free text), the session and window queries
    carry the triage breakdown of their breached checks into the report
    (`checks.triage.with_triage` adds the others').
    """
    enabled = [s for s in specs if s.enabled]
    data_quality: dict[str, int] = {}
    deviations: list[DeviationCount] = []
    triage: dict[str, Triage] = {}

    def session_query(w: Window, group: list[CheckSpec]) -> dict[str, CheckResult]:
        if source.state:  # the per-session level from the session state: triage not carried
            state.verify(store, source, group)
            shared = sessions.evaluate(
                store, source, w, group, per_session=state.per_session(source)
            )
        else:
            shared = sessions.evaluate(store, source, w, group, dims=dims)
        if group[0].window_ms is None:
            data_quality.update(shared.data_quality)
        triage.update(shared.triage)
        return shared.results

    def window_query(w: Window, group: list[CheckSpec]) -> dict[str, CheckResult]:
        found = events.evaluate(store, source, w, group, dims)
        triage.update(found.triage)
        return found.results

    def deviation_query(w: Window, group: list[CheckSpec]) -> dict[str, CheckResult]:
        (spec,) = group
        if isinstance(spec.params, DeviationContract):
            found = deviation.contract(store, source, w, spec, spec.params, dims)
            deviations[:] = found.aggregation
            if found.triage is not None:
                triage[spec.id] = found.triage
            return {spec.id: found.contract}
        if isinstance(spec.params, DeviationEvidence):
            result, carried = deviation.evidence(store, source, w, spec, spec.params.contract, dims)
            if carried is not None:
                triage[spec.id] = carried
            return {spec.id: result}
        raise TypeError(f"no evaluator for {spec.kind}")

    # The session checks share one query per distinct window length, and so do the
    # quantile, streak and share checks; every other check has a query of its own.
    session_groups = _grouped(sessions.session_checks(enabled))
    window_groups = _grouped(events.window_checks(enabled))
    shared = {spec.id for group in session_groups + window_groups for spec in group}
    queries: list[tuple[list[CheckSpec], Judge]] = [
        *((group, session_query) for group in session_groups),
        *((group, window_query) for group in window_groups),
        *(([spec], deviation_query) for spec in enabled if spec.id not in shared),
    ]
    results: dict[str, CheckResult] = {}
    for group, judge in queries:
        started = time.time_ns()
        try:
            results.update(judge(group[0].window_for(window), group))
        except StoreError as exc:
            _log_error(group, exc)
            results.update({spec.id: errored(spec, exc.problem) for spec in group})
        if timed is not None:
            timed([spec.id for spec in group], started, time.time_ns())

    ordered = {spec.id: results.get(spec.id) or disabled(spec) for spec in specs}
    return Report(
        window=window,
        source=source.name,
        checks=ordered,
        deviations=tuple(deviations),
        data_quality=data_quality,
        notes=_notes(source, data_quality),
        triage={
            i: triage[i] for i in ordered if i in triage and ordered[i].status is Status.BREACHED
        },
    )


def _notes(source: CompiledSource, data_quality: Mapping[str, int]) -> tuple[str, ...]:
    """What the checks did with rows they could not fully read, said where people look."""
    unreadable = data_quality.get("payload_not_json_object", 0)
    if not (source.session_in_payload and unreadable):
        return ()
    return (
        f"{unreadable} events carry metadata that is not a JSON object: no session id can be"
        " read from it, so the session checks count those events for no session"
        " (data_quality.payload_not_json_object)",
    )


def _log_error(specs: Sequence[CheckSpec], exc: StoreError) -> None:
    log.warning("checks %s could not run: %s", ", ".join(s.id for s in specs), exc.problem)
