"""One run's plans: which scan judges which check (each kind's `plan` adds its check to a shared
scan and returns the reader of its result), each scan run once, a store error confined to
its own checks (docs/architecture.md#one-evaluation-end-to-end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checks.base import CheckResult, CheckSpec, DeviationCount, Window
from checks.breakdown import Triage
from checks.scans import per_window
from checks.scans.binder import merged
from checks.scans.session import SessionScan
from checks.scans.window import WindowScan
from checks.scans.windows import ONE, Many, Windowing, Windows, empty
from checks.sources import CompiledSource
from checks.state import read as state
from watchdog.core.errors import StoreError
from watchdog.core.store import Store

log = logging.getLogger(__name__)

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """What a scan, a reader or a triage query runs with: the store, the source, the window.

    A scan of many windows in one pass runs with `windowing` (`Many`) and
    the window that spans them all; each window's reader with its own.
    """

    store: Store
    source: CompiledSource
    window: Window  # the check's own window (its length, or the run's)
    windowing: Windowing = ONE

    def _bound(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return merged(self.source.params, self.window.params(), self.windowing.params(), params)

    def aggregate(self, sql: str, params: Mapping[str, Any]) -> Row:
        """The one row of `sql`, with the source's and the window's parameters bound."""
        return self.store.aggregate(sql, self._bound(params))

    def by_window(self, sql: str, params: Mapping[str, Any]) -> dict[int, Row]:
        """The rows of `sql` by their window's index (`_w`, 1 for the oldest window)."""
        rows = self.store.query(sql, self._bound(params)).dicts()
        return {int(row.pop("_w")): row for row in rows}


@dataclass(frozen=True)
class Judged:
    """A check's verdict, and what rode along: its triage, the deviation aggregation."""

    result: CheckResult
    triage: Triage | None = None
    deviations: tuple[DeviationCount, ...] | None = None
    # The breakdown's query, when the scan carried what makes it cheap (the triage's items
    # found): run with the breakdown's dimensions by whoever completes the triage.
    breakdown: Breakdown | None = None


Breakdown = Callable[["Context", Sequence[str]], Triage]


Reader = Callable[[Row, Context], Judged]
Query = Callable[[Context], tuple[str, Mapping[str, Any]]]  # a query of its own: SQL, parameters


@dataclass
class Group:
    """One scan, the source it reads, and the checks it judges: over one window, or many.

    `run_many` runs it over many windows in one pass (`ctx.windowing`):
    the row of each window the scan found anything in.
    """

    window_ms: int | None
    source: CompiledSource
    run: Callable[[Context], Row]
    run_many: Callable[[Context], dict[int, Row]]
    checks: list[str] = field(default_factory=list)


@dataclass
class Plans:
    """The scans of one run over `source`; with `dims`, the scans carry their checks' triage."""

    source: CompiledSource
    dims: tuple[str, ...] | None = None
    groups: dict[tuple[str, int | None], Group] = field(default_factory=dict)
    sessions: dict[int | None, SessionScan] = field(default_factory=dict)
    windows: dict[int | None, WindowScan] = field(default_factory=dict)

    def session(self, spec: CheckSpec) -> SessionScan:
        """The session scan of `spec`'s window length, `spec` among its checks."""
        scan = self.sessions.get(spec.window_ms)
        if scan is None:
            scan = SessionScan(dims=self.dims)
            self.sessions[spec.window_ms] = scan
            self.groups[("session", spec.window_ms)] = Group(
                spec.window_ms, self.source, _session_run(scan), _session_run_many(scan)
            )
        self.groups[("session", spec.window_ms)].checks.append(spec.id)
        return scan

    def window(self, spec: CheckSpec) -> WindowScan:
        """The window scan of `spec`'s window length, `spec` among its checks."""
        scan = self.windows.get(spec.window_ms)
        if scan is None:
            scan = WindowScan(dims=self.dims)
            self.windows[spec.window_ms] = scan
            events = self.source.events_source  # beside a session state: the narrow table
            self.groups[("window", spec.window_ms)] = Group(
                spec.window_ms, events, _window_run(scan), _window_run_many(scan)
            )
        self.groups[("window", spec.window_ms)].checks.append(spec.id)
        return scan

    def own(self, spec: CheckSpec, query: Query) -> None:
        """A query of `spec`'s own."""

        def run(ctx: Context) -> Row:
            sql, params = query(ctx)
            return ctx.aggregate(sql, params)

        def run_many(ctx: Context) -> dict[int, Row]:
            sql, params = query(ctx)
            return ctx.by_window(sql, params)

        events = self.source.events_source  # beside a session state: the narrow table
        self.groups[("own:" + spec.id, spec.window_ms)] = Group(
            spec.window_ms, events, run, run_many, [spec.id]
        )

    def run(
        self,
        store: Store,
        window: Window,
        timed: Callable[[list[str], int, int], None] | None = None,
    ) -> Iterator[tuple[Group, Context, Row | StoreError]]:
        """Each scan run once, in plan order: its group, its context, its row or its error."""
        for group in self.groups.values():
            ctx = Context(store, group.source, window.sized(group.window_ms))
            started = time.time_ns()
            outcome: Row | StoreError
            try:
                outcome = group.run(ctx)
            except StoreError as exc:
                log.warning("checks %s could not run: %s", ", ".join(group.checks), exc.problem)
                outcome = exc
            if timed is not None:
                timed(group.checks, started, time.time_ns())
            yield group, ctx, outcome

    def run_windows(
        self, store: Store, windows: Windows
    ) -> Iterator[tuple[Group, list[tuple[Context, Row | StoreError]]]]:
        """Each scan run once over all `windows`: its group, and each window's context and row.

        A window the scan found nothing in gets the row of the scan over
        nothing (`checks.scans.windows.empty`): one more query, which reads
        no row, for all such windows.
        """
        for group in self.groups.values():
            sized = windows.sized(group.window_ms)
            contexts = [Context(store, group.source, w) for w in sized.windows]
            outcomes: list[Row | StoreError]
            try:
                rows = group.run_many(Context(store, group.source, sized.span, Many(sized)))
                missing = [i for i in range(len(sized)) if i + 1 not in rows]
                if missing:
                    nothing = group.run(Context(store, group.source, empty(sized.windows[0])))
                    rows.update({i + 1: nothing for i in missing})
                outcomes = [rows[i + 1] for i in range(len(sized))]
            except StoreError as exc:
                log.warning("checks %s could not run: %s", ", ".join(group.checks), exc.problem)
                outcomes = [exc] * len(sized)
            yield group, list(zip(contexts, outcomes, strict=True))


def session_sql(ctx: Context, scan: SessionScan) -> tuple[str, dict[str, Any]]:
    """The session scan's SQL and its parameters: over the events, or over the session state
    (`source.state`, refused when it was built for other checks)."""
    if ctx.source.state:
        kept = state.verify(ctx.store, ctx.source, scan)
        sql, extra = state.render(scan, ctx.source, ctx.window, kept)
        return sql, merged(scan.params(), extra)
    return scan.render_raw(ctx.source), scan.params()


def _session_run(scan: SessionScan) -> Callable[[Context], Row]:
    """The session scan's one row (its evidence ids resolved when read from the state)."""

    def run(ctx: Context) -> Row:
        row = ctx.aggregate(*session_sql(ctx, scan))
        if ctx.source.state:
            return state.resolve_ids(ctx.store, ctx.source, ctx.window, scan, row)
        return row

    return run


def _session_run_many(scan: SessionScan) -> Callable[[Context], dict[int, Row]]:
    """The session scan over many windows in one pass; from the session state, window by window.

    The session state is kept per hour, a few rows per session: each
    window reads its own (`checks.state.read`), as `check` does.
    """

    def run(ctx: Context) -> dict[int, Row]:
        assert isinstance(ctx.windowing, Many)
        if ctx.source.state:
            single = _session_run(scan)
            return {
                i + 1: single(Context(ctx.store, ctx.source, w))
                for i, w in enumerate(ctx.windowing.windows.windows)
            }
        sql, extra = per_window.render(scan, ctx.source, ctx.windowing.windows)
        return ctx.by_window(sql, merged(scan.params(), extra))

    return run


def _window_run(scan: WindowScan) -> Callable[[Context], Row]:
    def run(ctx: Context) -> Row:
        return ctx.aggregate(scan.render_raw(ctx.source), scan.params())

    return run


def _window_run_many(scan: WindowScan) -> Callable[[Context], dict[int, Row]]:
    def run(ctx: Context) -> dict[int, Row]:
        # The window scan reads no lookback: from the first window's start on.
        span = ctx.window
        ranged = replace(ctx, window=replace(span, lookback=span.length))
        return ranged.by_window(scan.render_raw(ctx.source, ctx.windowing), scan.params())

    return run
