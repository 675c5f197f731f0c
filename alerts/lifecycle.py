"""The alert state machine, pure and judged at the evaluation time: what opens, reminds,
resolves and refreshes an alert, with each check's no-data policy and the silences in force
(docs/alerts.md#the-alert-lifecycle, docs/spec.md section 8)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from checks.base import CheckResult, CheckSpec, NoDataPolicy, Severity, Status, Window
from watchdog.core.settings import RUN_CHECK_ID, STORE_CHECK_ID, AlertSettings

# The pseudo check id of "the source could not be read at all" (see alerts.pipeline).
STORE_CHECK = STORE_CHECK_ID
# The pseudo check id of "the daemon's run process died before it finished".
RUN_CHECK = RUN_CHECK_ID


class AlertState(enum.StrEnum):
    OK = "ok"
    FIRING = "firing"


class Cause(enum.StrEnum):
    """What an alert fired for (the firing episode's cause)."""

    NONE = ""  # it never fired
    BREACHED = "breached"
    ERROR = "error"  # the watchdog could not evaluate the check (or read the source)
    NO_DATA = "no_data"  # nothing to judge, under the check's no-data policy `alerting`


class Kind(enum.StrEnum):
    """What an announcement says."""

    FIRE = "fire"
    REPEAT = "repeat"
    RESOLVE = "resolve"
    # Not news: a firing alert sent again at a run that announces nothing about it, for the
    # receivers that keep it open only while it is re-sent (Alertmanager); see `refreshed`.
    REFRESH = "refresh"


@dataclass(frozen=True)
class Rules:
    """The lifecycle's settings (`[alerts]`, and each check's no-data policy)."""

    repeat_interval: timedelta = timedelta(hours=24)
    pending_runs: int = 1
    no_data_alerting: frozenset[str] = frozenset()  # check ids whose `no_data` opens the alert

    @classmethod
    def of(cls, settings: AlertSettings, checks: Iterable[CheckSpec] = ()) -> Rules:
        """The rules `[alerts]` configures, with the no-data policy of `checks`."""
        alerting = frozenset(c.id for c in checks if c.no_data is NoDataPolicy.ALERTING)
        return cls(settings.repeat_interval, settings.pending_runs, alerting)


@dataclass(frozen=True)
class Alert:
    """The durable state of one alert; one row of the `alert_state` table."""

    source: str
    check_id: str
    state: AlertState = AlertState.OK
    cause: Cause = Cause.NONE  # what the latest firing episode fired for
    streak: int = 0  # consecutive breached/error evaluations (for pending_runs)
    since: datetime | None = None  # when the current state began
    fired_at: datetime | None = None  # start of the latest firing episode
    last_at: datetime | None = None  # evaluation time of the latest evaluation applied
    last_status: str = ""
    last_value: float | None = None
    target: float | None = None
    severity: str = Severity.WARNING.value
    summary: str = ""
    notified_state: AlertState = AlertState.OK  # what chat was last told
    last_notified_at: datetime | None = None  # evaluation time of the last announcement
    silenced_until: datetime | None = None  # a silence in force at the latest evaluation
    no_data_since: datetime | None = None  # start of the first of the latest no_data windows
    version: int = 0
    # The firing alert (its check id) whose inhibit rule held this one at the latest evaluation
    # (`[[alerts.inhibit]]`), '' when none did.
    inhibited_by: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cause", Cause(self.cause))  # a string from older callers

    @property
    def firing(self) -> bool:
        return self.state is AlertState.FIRING

    @property
    def pending(self) -> bool:
        """Breached at least once but not yet for `pending_runs` evaluations."""
        return self.state is AlertState.OK and self.streak > 0


@dataclass(frozen=True)
class Notification:
    """One announcement: an alert that fired, is still firing, or resolved, at `at`."""

    kind: Kind
    source: str
    check_id: str
    cause: str  # a Cause (a plain string is taken as one); for a resolve: what it had fired for
    result: CheckResult  # the evaluation that decided it
    window: Window
    firing_since: datetime | None
    fired_for: timedelta | None = None  # resolve only
    after_silence: bool = False  # a silence held it until now
    after_inhibition: str = ""  # the alert whose inhibit rule held it until now, if one did
    no_data_since: datetime | None = None  # the windows since then had nothing to judge

    def __post_init__(self) -> None:
        object.__setattr__(self, "cause", Cause(self.cause))  # a string from older callers

    @property
    def no_data(self) -> bool:
        """Whether this fired because the check had nothing to judge (policy `alerting`)."""
        return self.cause is Cause.NO_DATA

    @property
    def at(self) -> datetime:
        return self.window.at

    @property
    def severity(self) -> Severity:
        return self.result.severity

    @property
    def is_error(self) -> bool:
        return self.cause is Cause.ERROR


@dataclass(frozen=True)
class Step:
    """The outcome of one evaluation for one alert."""

    alert: Alert
    notification: Notification | None = None
    held: bool = False  # an announcement was due but a silence (or an inhibit rule) held it
    stale: bool = False  # `at` was not after the last evaluation applied: nothing changed


_OPENS = (Status.BREACHED, Status.ERROR)


def refreshed(step: Step, result: CheckResult, window: Window) -> Notification | None:
    """A firing alert that this evaluation judged and announced nothing about, as a refresh.

    None when it announced something, was stale, is not firing, or a silence or an inhibit
    rule holds it (a held alert sends nothing).
    """
    alert = step.alert
    if step.notification is not None or step.stale or step.held or not alert.firing:
        return None
    if alert.silenced_until is not None or alert.inhibited_by:
        return None
    return Notification(
        kind=Kind.REFRESH,
        source=alert.source,
        check_id=alert.check_id,
        cause=alert.cause,
        result=result,
        window=window,
        firing_since=alert.fired_at,
        no_data_since=alert.no_data_since,
    )


def advance(
    previous: Alert,
    result: CheckResult,
    window: Window,
    rules: Rules,
    *,
    silenced_until: datetime | None = None,
    inhibited_by: str = "",
) -> Step:
    """Apply one evaluation's result to an alert, at `window.at`.

    `silenced_until` is the end of a silence in force at `window.at` (None
    when there is none), `inhibited_by` the firing alert whose inhibit rule
    holds this one ('' when none does): either way the state still changes,
    the announcement waits until neither holds it.
    """
    at = window.at
    if previous.last_at is not None and at <= previous.last_at:
        return Step(previous, stale=True)
    alert = replace(
        _transition(previous, result, window, rules),
        last_at=at,
        last_status=result.status.value,
        last_value=result.value,
        target=result.target,
        severity=result.severity.value,
        summary=result.summary,
        silenced_until=silenced_until,
        inhibited_by=inhibited_by,
        version=previous.version + 1,
    )
    kind = _announcement(previous, alert, result.status, at, rules)
    if kind is None:
        return Step(alert)
    if silenced_until is not None or inhibited_by:
        return Step(alert, held=True)
    resolved = kind is Kind.RESOLVE
    notification = Notification(
        kind=kind,
        source=previous.source,
        check_id=previous.check_id,
        cause=previous.cause if resolved else alert.cause,
        result=result,
        window=window,
        firing_since=alert.fired_at,
        fired_for=(
            alert.since - alert.fired_at if resolved and alert.since and alert.fired_at else None
        ),
        after_silence=previous.silenced_until is not None,
        after_inhibition=previous.inhibited_by,
        no_data_since=alert.no_data_since,
    )
    alert = replace(
        alert,
        notified_state=AlertState.OK if resolved else AlertState.FIRING,
        last_notified_at=at,
    )
    return Step(alert, notification)


def muted(alert: Alert, kind: Kind, at: datetime, until: datetime) -> Alert:
    """`alert` once a silence added after its evaluation `at` kept that evaluation's
    announcement (`kind`) from being sent: as if the silence had held it then, so that an
    alert still firing (or resolved) when the silence ends is announced then. An alert
    announced again since keeps its state: only the silence is recorded."""
    notified = alert.notified_state
    if alert.last_notified_at == at and kind is Kind.FIRE:
        notified = AlertState.OK
    elif alert.last_notified_at == at and kind is Kind.RESOLVE:
        notified = AlertState.FIRING
    ends = max(until, alert.silenced_until) if alert.silenced_until is not None else until
    return replace(alert, notified_state=notified, silenced_until=ends, version=alert.version + 1)


def _transition(previous: Alert, result: CheckResult, window: Window, rules: Rules) -> Alert:
    """The alert's state after `result`: what opens, keeps and resolves it (module docstring)."""
    at, status = window.at, result.status
    state, cause, streak = previous.state, previous.cause, previous.streak
    since, fired_at = previous.since, previous.fired_at
    no_data_since = previous.no_data_since
    if status is Status.NO_DATA:
        no_data_since = no_data_since or window.start
    elif status is not Status.DISABLED:  # a disabled check judged nothing either
        no_data_since = None
    opens = status in _OPENS or (
        status is Status.NO_DATA and previous.check_id in rules.no_data_alerting
    )
    if opens:
        streak += 1
        if state is AlertState.OK and streak >= rules.pending_runs:
            state, since, fired_at = AlertState.FIRING, at, at
        if state is AlertState.FIRING:
            cause = Cause(status.value)
    elif status is Status.OK:
        streak = 0
        if state is AlertState.FIRING:
            state, since = AlertState.OK, at
    # insufficient_data, disabled, and no_data under keep_state: the state stays as it is.
    return replace(
        previous,
        state=state,
        cause=cause,
        streak=streak,
        since=since if since is not None else at,
        fired_at=fired_at,
        no_data_since=no_data_since,
    )


def _announcement(
    previous: Alert, alert: Alert, status: Status, at: datetime, rules: Rules
) -> Kind | None:
    """What chat must be told now: a fire, a reminder, a resolution, or nothing."""
    if alert.state is AlertState.FIRING:
        if previous.notified_state is not AlertState.FIRING:
            return Kind.FIRE
        if (
            status is not Status.DISABLED
            and previous.last_notified_at is not None
            and at - previous.last_notified_at >= rules.repeat_interval
        ):
            return Kind.REPEAT
        return None
    return Kind.RESOLVE if previous.notified_state is AlertState.FIRING else None
