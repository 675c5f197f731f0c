"""One evaluation: each check planned by its kind into the shared scans, each scan run once, a
store error confined to its checks, and with triage every breach broken down
(docs/architecture.md#one-evaluation-end-to-end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from checks.base import CheckResult, CheckSpec, DeviationCount, Report, Status, Window
from checks.breakdown import Triage
from checks.kinds import kind_of
from checks.listed import with_event_details
from checks.scans.plans import Breakdown, Context, Group, Judged, Plans, Reader, Row
from checks.scans.row import QUALITY
from checks.scans.windows import Windows
from checks.sources import CompiledSource
from checks.triage import dimensions, plain
from checks.verdict import disabled, errored
from watchdog.core.errors import StoreError
from watchdog.core.store import Store

log = logging.getLogger(__name__)

# Told the check ids one query judged and when it ran (epoch ns); the daemon's check spans.
QueryTimer = Callable[[Sequence[str], int, int], None]


def evaluate(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    *,
    timed: QueryTimer | None = None,
    triage: bool = False,
    error_classes: bool = True,
) -> Report:
    """Judge every check in `specs` over `window` on `source`, each error contained.

    `timed`, when given, is told how long each scan took and which checks it
    judged. With `triage`, every breached check gets its breakdown (free
    text grouped as error classes only with `error_classes`).
    """
    by_id = {spec.id: spec for spec in specs if spec.enabled}
    plans = Plans(source, dims=tuple(plain(source.dims)) if triage else None)
    readers = {spec.id: kind_of(spec).plan(plans, spec) for spec in by_id.values()}
    found = _Found(plans)
    for group, ctx, row in plans.run(store, window, timed):
        found.read(group, ctx, row, by_id, readers)
    (report,) = with_event_details(
        store, source, [found.report(window, source, specs)], error_classes
    )
    if not triage:
        return report
    return complete_triage(
        store, source, specs, report, error_classes=error_classes, carried=found.breakdowns()
    )


def evaluate_windows(
    store: Store,
    source: CompiledSource,
    windows: Windows,
    specs: Sequence[CheckSpec],
    *,
    triage: bool = False,
    error_classes: bool = True,
    details: bool = True,
) -> list[Report]:
    """Judge every check in `specs` over each of `windows`, each scan reading them all once.

    The reports are those `evaluate` gives for each window on its own (the
    same verdicts, values, sample sizes and evidence; tests/test_backtest.py
    holds them to it), oldest first. With `triage`, the scans carry the
    breakdown where they can and each breached check of each window gets
    the rest queried, as `evaluate` does. Without `details`, the evidence
    keeps its ids and the events are not looked up (what SLO buckets count
    needs none of it).
    """
    by_id = {spec.id: spec for spec in specs if spec.enabled}
    plans = Plans(source, dims=tuple(plain(source.dims)) if triage else None)
    readers = {spec.id: kind_of(spec).plan(plans, spec) for spec in by_id.values()}
    found = [_Found(plans) for _ in windows.windows]
    # One window (a burn tick's bucket): its own scans, simpler than the pieces of many.
    ran: Iterable[tuple[Group, list[tuple[Context, Row | StoreError]]]]
    if len(windows.windows) == 1:
        ran = ((g, [(ctx, row)]) for g, ctx, row in plans.run(store, windows.windows[0]))
    else:
        ran = plans.run_windows(store, windows)
    for group, outcomes in ran:
        for each, (ctx, row) in zip(found, outcomes, strict=True):
            each.read(group, ctx, row, by_id, readers)
    reports = [f.report(w, source, specs) for f, w in zip(found, windows.windows, strict=True)]
    if details:
        reports = with_event_details(store, source, reports, error_classes)
    if not triage:
        return reports
    return [
        complete_triage(
            store, source, specs, report, error_classes=error_classes, carried=f.breakdowns()
        )
        for f, report in zip(found, reports, strict=True)
    ]


@dataclass
class _Found:
    """What the scans of one window said: each check's verdict, the data-quality counts."""

    plans: Plans
    judged: dict[str, Judged] = field(default_factory=dict)
    data_quality: dict[str, int] = field(default_factory=dict)

    def read(
        self,
        group: Group,
        ctx: Context,
        row: Row | StoreError,
        by_id: Mapping[str, CheckSpec],
        readers: Mapping[str, Reader],
    ) -> None:
        """The verdicts of `group`'s checks from its scan's row (or the error it raised)."""
        for check_id in group.checks:
            spec = by_id[check_id]
            try:
                if isinstance(row, StoreError):
                    raise row
                self.judged[check_id] = readers[check_id](row, ctx)
            except StoreError as exc:
                self.judged[check_id] = Judged(errored(spec, exc.problem))
        default_session = self.plans.groups.get(("session", None))
        if group is default_session and not isinstance(row, StoreError):
            self.data_quality = {r: int(row[f"dq_{r}"] or 0) for r in QUALITY}

    def breakdowns(self) -> dict[str, Breakdown]:
        """The breakdown queries the scans carried the makings of, by check."""
        return {i: b for i, j in self.judged.items() if (b := j.breakdown) is not None}

    def report(self, window: Window, source: CompiledSource, specs: Sequence[CheckSpec]) -> Report:
        judged = self.judged
        results = {s.id: judged[s.id].result if s.id in judged else disabled(s) for s in specs}
        deviations: tuple[DeviationCount, ...] = ()
        for each in judged.values():
            deviations = each.deviations if each.deviations is not None else deviations
        return Report(
            window=window,
            source=source.name,
            checks=results,
            deviations=deviations,
            data_quality=self.data_quality,
            notes=_notes(source, self.data_quality),
            triage={i: t for i, j in judged.items() if (t := j.triage) is not None},
        )


def complete_triage(
    store: Store,
    source: CompiledSource,
    specs: Sequence[CheckSpec],
    report: Report,
    *,
    error_classes: bool = True,
    carried: Mapping[str, Breakdown] | None = None,
) -> Report:
    """`report` with a breakdown for every breached check: what it carries, the rest queried
    (by the query its scan `carried` the makings of, else by its kind).

    A breakdown that cannot be queried says why in its entry; the others still run.
    """
    dims = dimensions(source, error_classes)
    found = dict(report.triage)
    for spec in specs:
        result = report.checks.get(spec.id)
        if result is None or result.status is not Status.BREACHED or spec.id in found:
            continue
        if not kind_of(spec).triaged:
            continue
        breakdown = _queried(
            store, source, report.window, dims, spec, result, (carried or {}).get(spec.id)
        )
        if breakdown is not None:
            found[spec.id] = breakdown
    ordered = {i: found[i] for i in report.checks if i in found}
    return replace(report, triage=ordered)


def _queried(
    store: Store,
    source: CompiledSource,
    window: Window,
    dims: Sequence[str],
    spec: CheckSpec,
    result: CheckResult,
    carried: Breakdown | None,
) -> Triage | None:
    """The breakdown of a breached check its scan did not carry: by the query the scan found
    the items for, else asked of its kind."""
    ctx = Context(store, source, spec.window_for(window))
    try:
        if carried is not None:
            return carried(ctx, dims)
        return kind_of(spec).triage(ctx, dims, spec, result)
    except StoreError as exc:
        log.warning("triage of %s could not run: %s", spec.id, exc.problem)
        return Triage.failed(exc.problem)


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
