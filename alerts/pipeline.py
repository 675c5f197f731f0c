"""From a report to every receiver: the one entry point of alerting, `run(AlertContext,
Evaluation)` behind `process`, `process_store_error`, `process_crash` and `settle_run_alert`
(its steps: docs/architecture.md#one-evaluation-end-to-end, step 5; the pseudo checks `store`
and `run`: docs/alerts.md#the-alert-lifecycle)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

from alerts.base import Notifier, Timer
from alerts.inhibit import inhibitions
from alerts.lease import Guard
from alerts.lifecycle import (
    RUN_CHECK,
    STORE_CHECK,
    Alert,
    AlertState,
    Kind,
    Notification,
    Rules,
    Step,
    advance,
    refreshed,
)
from alerts.notifiers import build_notifiers
from alerts.outbox import DeliveryReport, compose, deliver_pending, enqueue
from alerts.render import templates
from alerts.routing import Router
from alerts.rows import RunKind
from alerts.silences import silenced_until, silences_in_force
from alerts.state import (
    LIVE,
    check_results_json,
    ensure_schema,
    judged,
    load_alerts,
    record_run,
    save_alerts,
)
from checks.base import CheckResult, Report, Severity, Status, Window
from checks.builtin import configured_checks
from checks.kinds import kind_of
from watchdog.core.links import page_link
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import CLOCK_SKEW

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessOutcome:
    """What one run of the alert pipeline did."""

    source: str
    at: datetime
    notifications: tuple[Notification, ...]  # announced (enqueued) by this run
    held: tuple[str, ...]  # check ids whose announcement a silence holds
    firing: tuple[str, ...]  # check ids firing after this run
    pending: tuple[str, ...]  # check ids breached but waiting for alerts.pending_runs
    enqueued: tuple[str, ...]  # outbox ids written by this run
    delivery: DeliveryReport
    stale: bool  # `at` was not after the last evaluation applied: nothing new
    notifiers: tuple[str, ...]  # the notifiers configured
    receiver_tables: str = ""  # the tables that would configure one (settings.plugins)
    # (check id, the firing alert whose inhibit rule holds its announcement), not silenced
    inhibited: tuple[tuple[str, str], ...] = ()

    @property
    def errors(self) -> tuple[str, ...]:
        return self.delivery.errors

    def announced(self) -> list[str]:
        """What this run announced, reminded, resolved or held, one part each ([] for nothing)."""
        counts = {kind: [n.check_id for n in self.notifications if n.kind is kind] for kind in Kind}
        parts = []
        for kind, word in (
            (Kind.FIRE, "fired"),
            (Kind.REPEAT, "reminded"),
            (Kind.RESOLVE, "resolved"),
        ):
            if counts[kind]:
                parts.append(f"{word} {', '.join(counts[kind])}")
        if self.held:
            parts.append(f"held by a silence: {', '.join(self.held)}")
        for by in sorted({by for _, by in self.inhibited}):
            held = [check_id for check_id, source in self.inhibited if source == by]
            parts.append(f"held while {by} fires: {', '.join(held)}")
        return parts

    def summary(self, again: str = "") -> str:
        """One line for people: what fired, resolved, was sent; `again`, when given, is the
        command that lets an evaluation time already processed be judged again."""
        parts = self.announced()
        if not parts:
            stale = "this evaluation time was already processed"
            if again:
                stale += f"; to judge it again: `{again}`"
            parts.append("nothing new" + (f" ({stale})" if self.stale else ""))
        firing = f"{len(self.firing)} firing" + (
            f" ({', '.join(self.firing)})" if self.firing else ""
        )
        sent = f"{len(self.delivery.delivered)} message(s) delivered"
        if not self.notifiers:
            sent = f"no receiver configured ({self.receiver_tables})"
        waiting = self.delivery.pending + self.delivery.held
        tail = f", {waiting} waiting in the outbox" if waiting else ""
        if self.delivery.rejected:
            tail += f", {self.delivery.rejected} set aside (rejected)"
        return f"alerts: {'; '.join(parts)}; {firing}; {sent}{tail}"


def _store_check(status: Status, summary: str) -> CheckResult:
    """The `store` pseudo check: whether the source could be read (severity critical)."""
    return CheckResult(
        id=STORE_CHECK,
        status=status,
        value=None,
        target=0,
        severity=Severity.CRITICAL,
        sample_size=0,
        summary=summary,
    )


def source_read(source: str) -> CheckResult:
    """The `store` pseudo check when the source was read."""
    return _store_check(Status.OK, f"the source {source} was read")


def source_unreadable(problem: str) -> CheckResult:
    """The `store` pseudo check when the source could not be read."""
    return _store_check(Status.ERROR, f"could not read the source: {problem}")


def run_crashed(problem: str) -> CheckResult:
    """The `run` pseudo check when a run's process died before it finished."""
    return replace(_store_check(Status.ERROR, problem), id=RUN_CHECK)


def run_finished() -> CheckResult:
    """The `run` pseudo check when a run finished."""
    return replace(_store_check(Status.OK, "a run finished"), id=RUN_CHECK)


def _heal(alert: Alert, now: datetime) -> Alert:
    """An alert last judged at a time in the future (a replay at a future `--at`, which
    older versions accepted) would make every live evaluation stale: judged anew."""
    if alert.last_at is not None and alert.last_at > now + CLOCK_SKEW:
        log.warning(
            "alert %s was last judged at %s, in the future: judging it anew",
            alert.check_id,
            alert.last_at.isoformat(),
        )
        return replace(alert, last_at=None)
    return alert


class DeliveryArgs(TypedDict, total=False):
    """The keyword arguments every entry point takes: when it runs, and how it delivers."""

    now: Required[datetime]  # the wall clock: delivery, quiet hours, ages
    notifiers: Mapping[str, Notifier] | None  # default: the configured receivers
    timer: Timer | None  # paces the delivery's retries (tests hand in a fake one)
    guard: Guard | None  # the alert lease's checkpoint (alerts.lease)
    deliver: bool  # False: enqueue only, for `deliver` to send with the store closed


@dataclass(frozen=True)
class AlertContext:
    """Where and how one run of the pipeline works: the store, the settings, the clock,
    the receivers, the pacing of retries and the alert lease's checkpoint."""

    store: Store
    settings: Settings
    now: datetime
    notifiers: Mapping[str, Notifier]
    timer: Timer | None = None
    guard: Guard | None = None
    deliver: bool = True

    @classmethod
    def of(cls, store: Store, settings: Settings, **args: Unpack[DeliveryArgs]) -> AlertContext:
        notifiers = args.get("notifiers")
        return cls(
            store,
            settings,
            args["now"],
            build_notifiers(settings) if notifiers is None else notifiers,
            args.get("timer"),
            args.get("guard"),
            args.get("deliver", True),
        )


@dataclass(frozen=True)
class Evaluation:
    """What one run applies: the results of one source at one window, and what to record."""

    source: str
    window: Window
    results: Mapping[str, CheckResult]
    checks_json: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    run_status: str = ""  # what the run log records
    duration_s: float | None = None
    problem: str = ""  # why the source could not be read
    kind: RunKind = LIVE
    link: str = ""  # the window's page, '' when none
    record: bool = True  # write a run-log row...
    keep_judged: bool = False  # ...unless a run already judged that window (it keeps its verdict)
    key: str = ""  # sets apart the outbox ids of another path at the same time (`run/`)
    # Alerts whose announcements another one holds while it fires (an SLO's ticket alert, by
    # its page alert): held check id -> holding check id, the holder judged in this evaluation.
    holds: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)  # check id -> kind, beyond the checks


def process(
    store: Store,
    settings: Settings,
    report: Report,
    *,
    run_status: str | None = None,
    duration_s: float | None = None,
    kind: str = LIVE,
    **args: Unpack[DeliveryArgs],
) -> ProcessOutcome:
    """Record the run, advance the alerts, enqueue and deliver; see the module docstring.

    `now` is the wall clock (delivery, quiet hours, ages); transitions are
    judged at `report.window.at`. `notifiers` defaults to the configured
    ones (`alerts.notifiers.build_notifiers`). `run_status` overrides the
    status the run log records (default: the report's). `timer` paces the
    delivery's retries (tests hand in a fake one).
    """
    store_result = source_read(report.source)
    evaluation = Evaluation(
        source=report.source,
        window=report.window,
        results={**report.checks, STORE_CHECK: store_result},
        checks_json={**check_results_json(report), STORE_CHECK: store_result.to_json()},
        run_status=run_status or report.status.value,
        duration_s=duration_s,
        kind=RunKind(kind),
        link=page_link(settings.report.base_url, report.window.end),
    )
    return run(AlertContext.of(store, settings, **args), evaluation)


def process_store_error(
    store: Store,
    settings: Settings,
    window: Window,
    problem: str,
    *,
    duration_s: float | None = None,
    kind: str = LIVE,
    **args: Unpack[DeliveryArgs],
) -> ProcessOutcome:
    """Record a run that could not read the source, and fire the `store` alert for it.

    The pseudo check `store` (severity critical) is `error` here, worded "the
    watchdog could not read the source"; the next successful `process` of
    the same source resolves it. The other alerts keep their state: nothing
    was judged. `problem` is one line (a StoreError's, its URL masked). The
    run log gets a row with status `error` and this problem, unless a run
    already judged that window (a spooled error run flushed late): it keeps
    its verdict. No page is written for such a window: no link.
    """
    result = source_unreadable(problem)
    evaluation = Evaluation(
        source=settings.source.display_name,
        window=window,
        results={STORE_CHECK: result},
        checks_json={STORE_CHECK: result.to_json()},
        run_status=Status.ERROR.value,
        duration_s=duration_s,
        problem=problem,
        kind=RunKind(kind),
        keep_judged=True,
    )
    return run(AlertContext.of(store, settings, **args), evaluation)


def process_crash(
    store: Store, settings: Settings, window: Window, problem: str, **args: Unpack[DeliveryArgs]
) -> ProcessOutcome:
    """Fire the `run` alert: a run's process died before it finished (killed, out of memory).

    `window` ends when the death was seen (the wall clock: the alert is about
    the process, not about a window of data); `problem` says how it died. No
    run-log row is written: the windows that run was judging are judged again
    by the next one, and those it finished keep their verdicts.
    """
    return run(AlertContext.of(store, settings, **args), _run_alert(settings, window, problem))


def settle_run_alert(
    store: Store, settings: Settings, window: Window, **args: Unpack[DeliveryArgs]
) -> ProcessOutcome | None:
    """After a run that finished: resolve the `run` alert (or reset its pending count).

    None when it is neither firing nor pending (the usual case: one query).
    `window` ends at the wall clock, as in `process_crash`.
    """
    alert = load_alerts(store, settings, settings.source.display_name).get(RUN_CHECK)
    if alert is None or not (
        alert.firing or alert.pending or alert.notified_state is AlertState.FIRING
    ):
        return None
    return run(AlertContext.of(store, settings, **args), _run_alert(settings, window, ""))


def deliver(
    open_store: Callable[[], AbstractContextManager[Store]],
    settings: Settings,
    **args: Unpack[DeliveryArgs],
) -> DeliveryReport:
    """Deliver what waits in the outbox of the configured source, opening the store only for
    each read and write, never while a receiver answers (after runs made with `deliver=False`)."""
    notifiers = args.get("notifiers")
    return deliver_pending(
        open_store,
        settings,
        build_notifiers(settings) if notifiers is None else notifiers,
        now=args["now"],
        timer=args.get("timer"),
        source=settings.source.display_name,
        guard=args.get("guard"),
    )


def _run_alert(settings: Settings, window: Window, problem: str) -> Evaluation:
    """The `run` pseudo check: fired with `problem`, resolved without; never in the run log."""
    result = run_crashed(problem) if problem else run_finished()
    return Evaluation(
        source=settings.source.display_name,
        window=window,
        results={RUN_CHECK: result},
        problem=problem,
        record=False,
        key="run/",
    )


def run(context: AlertContext, evaluation: Evaluation) -> ProcessOutcome:
    """One run of the pipeline, in order: create the tables when missing; advance every alert
    the evaluation judged (at its time, with the silences in force now); route and render
    one message per receiver (per alert for PagerDuty; refreshes for Alertmanager) and write
    them to the outbox before anything is sent; save the states and record the run; deliver.

    Delivery failures never raise: they come back as one line each in `errors` (secrets
    masked). A StoreError (the watchdog's own tables) and a ConfigError (a broken custom
    template) do; so does LeaseLost from `context.guard` before the lifecycle starts.
    """
    store, settings, now, e = context.store, context.settings, context.now, evaluation
    renderer = templates(settings.alerts.templates_dir)
    ensure_schema(store, settings)
    if context.guard is not None:
        context.guard()  # LeaseLost: another process runs the alerts of this source
    record = e.record and not (e.keep_judged and judged(store, settings, e.source, e.window.at))

    checks = configured_checks(settings)
    kinds = {c.id: kind_of(c).name for c in checks}
    rules = Rules.of(settings.alerts, checks)
    alerts = {k: _heal(a, now) for k, a in load_alerts(store, settings, e.source).items()}
    silences = silences_in_force(store, settings, now)

    def advanced(check_id: str, holders: Mapping[str, Step], inhibited_by: str) -> Step:
        until = silenced_until(silences, check_id)
        holder = holders.get(e.holds.get(check_id, ""))
        if holder is not None and holder.alert.firing:
            until = max(until, e.window.at) if until is not None else e.window.at
        return advance(
            alerts.get(check_id) or Alert(source=e.source, check_id=check_id),
            e.results[check_id],
            e.window,
            rules,
            silenced_until=until,
            inhibited_by=inhibited_by,
        )

    def judged_all(held_by: Mapping[str, str]) -> dict[str, Step]:
        by_id: dict[str, Step] = {}
        # Holders first: whether a held alert is held depends on its holder after this evaluation.
        for check_id in sorted(e.results, key=lambda c: c in e.holds):
            by_id[check_id] = advanced(check_id, by_id, held_by.get(check_id, ""))
        return by_id

    # Inhibition follows the states this evaluation leaves (a freshness breach judged now
    # holds the other checks of the same run), then each alert is advanced with its hold.
    judged_now = {c: step.alert for c, step in judged_all({}).items()}
    held_by = inhibitions({**alerts, **judged_now}, settings.alerts.inhibit, kinds)
    by_id = judged_all(held_by)
    steps = [by_id[check_id] for check_id in e.results]
    notifications = [s.notification for s in steps if s.notification is not None]
    # Firing alerts re-sent to the receivers that keep them open only so (Alertmanager).
    refreshes = [
        r
        for s, result in zip(steps, e.results.values(), strict=True)
        if (r := refreshed(s, result, e.window)) is not None
    ]

    rows = compose(
        [*notifications, *refreshes],
        context.notifiers,
        renderer,
        now=now,
        router=Router.of(settings.alerts),
        link=e.link,
        key=e.key,
        kinds={**kinds, **e.kinds},
        refreshing=frozenset(
            name for name, r in settings.alerts.receivers().items() if r.refreshes
        ),
    )
    enqueue(store, settings, rows)  # before anything is sent, and before the state moves on
    save_alerts(store, settings, [s.alert for s in steps if not s.stale], now)
    if record:
        record_run(
            store,
            settings,
            source=e.source,
            window=e.window,
            now=now,
            status=e.run_status,
            checks=e.checks_json,
            duration_s=e.duration_s,
            problem=e.problem,
            notifications=len(notifications),
            kind=e.kind,
        )
    delivery = DeliveryReport()
    if context.deliver:
        delivery = deliver_pending(
            store,
            settings,
            context.notifiers,
            now=now,
            timer=context.timer,
            source=e.source,
            guard=context.guard,
        )

    current = {**alerts, **{s.alert.check_id: s.alert for s in steps}}
    return ProcessOutcome(
        source=e.source,
        at=e.window.at,
        notifications=tuple(notifications),
        held=tuple(s.alert.check_id for s in steps if s.held and s.alert.silenced_until),
        inhibited=tuple(
            (s.alert.check_id, s.alert.inhibited_by)
            for s in steps
            if s.held and s.alert.inhibited_by and s.alert.silenced_until is None
        ),
        firing=tuple(sorted(c for c, a in current.items() if a.firing)),
        pending=tuple(sorted(c for c, a in current.items() if a.pending)),
        enqueued=tuple(r.id for r in rows),
        delivery=delivery,
        stale=bool(steps) and all(s.stale for s in steps),
        notifiers=tuple(context.notifiers),
        receiver_tables=settings.plugins.receiver_tables(),
    )
