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
    """One scan and the checks it judges."""

    window_ms: int | None
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
            # The state holds no dimensions: its checks' triage is read from the events.
            scan = SessionScan(dims=None if self.source.state else self.dims)
            self.sessions[spec.window_ms] = scan
            self.groups[("session", spec.window_ms)] = Group(spec.window_ms, _session_run(scan))
        self.groups[("session", spec.window_ms)].checks.append(spec.id)
        return scan

    def window(self, spec: CheckSpec) -> WindowScan:
        """The window scan of `spec`'s window length, `spec` among its checks."""
        scan = self.windows.get(spec.window_ms)
        if scan is None:
            scan = WindowScan(dims=self.dims)
            self.windows[spec.window_ms] = scan
            self.groups[("window", spec.window_ms)] = Group(spec.window_ms, _window_run(scan))
        self.groups[("window", spec.window_ms)].checks.append(spec.id)
        return scan

    def own(self, spec: CheckSpec, query: Query) -> None:
        """A query of `spec`'s own."""

        def run(ctx: Context) -> Row:
            sql, params = query(ctx)
            return ctx.aggregate(sql, params)

        self.groups[("own:" + spec.id, spec.window_ms)] = Group(spec.window_ms, run, [spec.id])

    def run(
        self,
        store: Store,
        window: Window,
        timed: Callable[[list[str], int, int], None] | None = None,
    ) -> Iterator[tuple[Group, Context, Row | StoreError]]:
        """Each scan run once, in plan order: its group, its context, its row or its error."""
        for group in self.groups.values():
            ctx = Context(store, self.source, window.sized(group.window_ms))
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


def _session_run(scan: SessionScan) -> Callable[[Context], Row]:
    """The session scan's one row: from the events, or from the session state (`source.state`)."""

    def run(ctx: Context) -> Row:
        if ctx.source.state:
            state.verify(ctx.store, ctx.source, scan)
            sql, extra = state.render(scan, ctx.source, ctx.window)
            return ctx.aggregate(sql, {**scan.params(), **extra})
        return ctx.aggregate(scan.render_raw(ctx.source), scan.params())

    return run


def _window_run(scan: WindowScan) -> Callable[[Context], Row]:
    def run(ctx: Context) -> Row:
        return ctx.aggregate(scan.render_raw(ctx.source), scan.params())

    return run
