"""One run's plans: which scan judges which check (each kind's `plan` adds its check to a shared
scan and returns the reader of its result), each scan run once, a store error confined to
its own checks (docs/architecture.md#one-evaluation-end-to-end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from checks.base import CheckResult, CheckSpec, DeviationCount, Window
from checks.breakdown import Triage
from checks.scans.session import SessionScan
from checks.scans.window import WindowScan
from checks.sources import CompiledSource
from checks.state import read as state
from watchdog.core.errors import StoreError
from watchdog.core.store import Store

log = logging.getLogger(__name__)

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """What a scan, a reader or a triage query runs with: the store, the source, the window."""

    store: Store
    source: CompiledSource
    window: Window  # the check's own window (its length, or the run's)

    def aggregate(self, sql: str, params: Mapping[str, Any]) -> Row:
        """The one row of `sql`, with the source's and the window's parameters bound."""
        return self.store.aggregate(sql, {**self.source.params, **self.window.params(), **params})


@dataclass(frozen=True)
class Judged:
    """A check's verdict, and what rode along: its triage, the deviation aggregation."""

    result: CheckResult
    triage: Triage | None = None
    deviations: tuple[DeviationCount, ...] | None = None


Reader = Callable[[Row, Context], Judged]
Query = Callable[[Context], tuple[str, Mapping[str, Any]]]  # a query of its own: SQL, parameters


@dataclass
class Group:
    """One scan, the source it reads, and the checks it judges."""

    window_ms: int | None
    source: CompiledSource
    run: Callable[[Context], Row]
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
            run = _session_run(scan)
            self.groups[("session", spec.window_ms)] = Group(spec.window_ms, self.source, run)
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
                spec.window_ms, events, _window_run(scan)
            )
        self.groups[("window", spec.window_ms)].checks.append(spec.id)
        return scan

    def own(self, spec: CheckSpec, query: Query) -> None:
        """A query of `spec`'s own."""

        def run(ctx: Context) -> Row:
            sql, params = query(ctx)
            return ctx.aggregate(sql, params)

        events = self.source.events_source  # beside a session state: the narrow table
        self.groups[("own:" + spec.id, spec.window_ms)] = Group(
            spec.window_ms, events, run, [spec.id]
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


def session_sql(ctx: Context, scan: SessionScan) -> tuple[str, dict[str, Any]]:
    """The session scan's SQL and its parameters: over the events, or over the session state
    (`source.state`, refused when it was built for other checks)."""
    if ctx.source.state:
        kept = state.verify(ctx.store, ctx.source, scan)
        sql, extra = state.render(scan, ctx.source, ctx.window, kept)
        return sql, {**scan.params(), **extra}
    return scan.render_raw(ctx.source), scan.params()


def _session_run(scan: SessionScan) -> Callable[[Context], Row]:
    """The session scan's one row (its evidence ids resolved when read from the state)."""

    def run(ctx: Context) -> Row:
        row = ctx.aggregate(*session_sql(ctx, scan))
        if ctx.source.state:
            return state.resolve_ids(ctx.store, ctx.source, ctx.window, scan, row)
        return row

    return run


def _window_run(scan: WindowScan) -> Callable[[Context], Row]:
    def run(ctx: Context) -> Row:
        return ctx.aggregate(scan.render_raw(ctx.source), scan.params())

    return run
