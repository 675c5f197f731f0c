"""The alert state machine alone: pure, judged at the evaluation time (docs/spec.md section 8)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from alerts.lifecycle import Alert, AlertState, Kind, Notification, Rules, Step, advance
from checks.base import CheckResult, Status, Window
from tests.alerts.conftest import SOURCE, T0, H, result

RULES = Rules(repeat_interval=24 * H, pending_runs=1)


def window(at: datetime) -> Window:
    return Window(at=at, length=4 * H, lookback=24 * H)


def run(
    statuses: Sequence[Status | CheckResult],
    *,
    rules: Rules = RULES,
    every: timedelta = 4 * H,
    start: datetime = T0,
    silenced: Sequence[datetime | None] | None = None,
) -> tuple[Alert, list[Step]]:
    """Feed one check's statuses, one evaluation every `every`; return the state and the steps."""
    alert = Alert(source=SOURCE, check_id="recall_coverage")
    steps = []
    for i, status in enumerate(statuses):
        res = status if isinstance(status, CheckResult) else result("recall_coverage", status)
        until = silenced[i] if silenced else None
        step = advance(alert, res, window(start + i * every), rules, silenced_until=until)
        steps.append(step)
        alert = step.alert
    return alert, steps


def announced(steps: Sequence[Step]) -> list[tuple[Kind, datetime]]:
    return [(s.notification.kind, s.notification.at) for s in steps if s.notification]


def test_breach_fires_once() -> None:
    """A breach opens the alert and announces it; the next breaches announce nothing."""
    alert, steps = run([Status.BREACHED, Status.BREACHED, Status.BREACHED])
    assert announced(steps) == [(Kind.FIRE, T0)]
    assert alert.state is AlertState.FIRING
    assert alert.fired_at == T0


def test_first_ok_announces_nothing() -> None:
    """An alert that never fired has nothing to resolve."""
    alert, steps = run([Status.OK, Status.OK])
    assert announced(steps) == []
    assert alert.state is AlertState.OK


def test_repeat_after_repeat_interval() -> None:
    """While firing, a reminder goes out every repeat_interval, judged at the evaluation time."""
    _, steps = run([Status.BREACHED] * 14)  # every 4h for 52h
    assert announced(steps) == [
        (Kind.FIRE, T0),
        (Kind.REPEAT, T0 + 24 * H),
        (Kind.REPEAT, T0 + 48 * H),
    ]


def test_resolve_once_with_how_long_it_fired() -> None:
    """Ok after firing resolves once and says how long it fired."""
    alert, steps = run([Status.BREACHED, Status.BREACHED, Status.OK, Status.OK])
    assert announced(steps) == [(Kind.FIRE, T0), (Kind.RESOLVE, T0 + 8 * H)]
    resolve = steps[2].notification
    assert resolve is not None and resolve.fired_for == 8 * H
    assert alert.state is AlertState.OK and alert.since == T0 + 8 * H


def test_pending_runs_needs_consecutive_breaches() -> None:
    """With pending_runs 3, an alert opens on the third consecutive breach, not before."""
    rules = Rules(repeat_interval=24 * H, pending_runs=3)
    alert, steps = run([Status.BREACHED, Status.BREACHED, Status.OK, Status.BREACHED], rules=rules)
    assert announced(steps) == []
    assert alert.pending and alert.streak == 1
    alert, steps = run([Status.BREACHED] * 3, rules=rules)
    assert announced(steps) == [(Kind.FIRE, T0 + 8 * H)]


def test_unknown_statuses_neither_count_nor_reset_pending_runs() -> None:
    """no_data between two breaches keeps the streak: the second breach opens with pending_runs 2."""
    rules = Rules(repeat_interval=24 * H, pending_runs=2)
    _, steps = run([Status.BREACHED, Status.NO_DATA, Status.BREACHED], rules=rules)
    assert announced(steps) == [(Kind.FIRE, T0 + 8 * H)]


def test_error_fires_worded_as_error() -> None:
    """An error result fires an alert whose cause is error, not breached."""
    alert, steps = run([Status.ERROR])
    note = steps[0].notification
    assert isinstance(note, Notification)
    assert note.kind is Kind.FIRE and note.is_error
    assert alert.cause == "error"


def test_error_then_ok_resolves_the_error_alert() -> None:
    """Once the check can be evaluated and is ok, the error alert resolves (as an error alert)."""
    _, steps = run([Status.ERROR, Status.OK])
    note = steps[1].notification
    assert note is not None and note.kind is Kind.RESOLVE and note.is_error


def test_no_data_and_insufficient_data_keep_state() -> None:
    """no_data and insufficient_data neither resolve a firing alert nor open one."""
    alert, steps = run([Status.BREACHED, Status.NO_DATA, Status.INSUFFICIENT_DATA])
    assert alert.state is AlertState.FIRING
    assert announced(steps) == [(Kind.FIRE, T0)]
    alert, steps = run([Status.NO_DATA, Status.INSUFFICIENT_DATA, Status.DISABLED])
    assert alert.state is AlertState.OK and announced(steps) == []


def test_disabled_keeps_state_without_reminders() -> None:
    """A check disabled while firing stays firing but is not repeated."""
    alert, steps = run([Status.BREACHED] + [Status.DISABLED] * 10)
    assert alert.state is AlertState.FIRING
    assert announced(steps) == [(Kind.FIRE, T0)]


def test_same_evaluation_time_twice_changes_nothing() -> None:
    """Applying the same `at` again (or an earlier one) is stale: no state change, no announcement."""
    alert, _ = run([Status.BREACHED])
    again = advance(alert, result("recall_coverage", Status.OK), window(T0), RULES)
    assert again.stale and again.notification is None and again.alert == alert
    earlier = advance(alert, result("recall_coverage", Status.OK), window(T0 - H), RULES)
    assert earlier.stale


def test_silence_holds_the_announcement_but_not_the_state() -> None:
    """A silenced breach fires (state changes) without announcing; at expiry it is announced."""
    until = T0 + 6 * H
    _, steps = run(
        [Status.BREACHED, Status.BREACHED, Status.BREACHED], silenced=[until, until, None]
    )
    assert steps[0].alert.state is AlertState.FIRING and steps[0].held
    assert announced(steps) == [(Kind.FIRE, T0 + 8 * H)]
    assert steps[2].notification is not None and steps[2].notification.after_silence
    assert steps[2].notification.firing_since == T0


def test_fired_and_resolved_inside_a_silence_announces_nothing() -> None:
    """An alert that fired and resolved while silenced leaves chat as it was: nothing to say."""
    until = T0 + 6 * H
    _, steps = run([Status.BREACHED, Status.OK, Status.OK], silenced=[until, until, None])
    assert announced(steps) == []


def test_resolve_held_by_a_silence_is_announced_when_it_ends() -> None:
    """Chat was told "firing"; a silenced resolve is announced when the silence ends, with its duration."""
    until = T0 + 10 * H
    _, steps = run(
        [Status.BREACHED, Status.OK, Status.OK, Status.OK], silenced=[None, until, until, None]
    )
    assert announced(steps) == [(Kind.FIRE, T0), (Kind.RESOLVE, T0 + 12 * H)]
    resolve = steps[3].notification
    assert resolve is not None and resolve.fired_for == 4 * H


# ---- no data: keep_state (the default) and alerting --------------------------------------

NO_DATA_ALERTING = Rules(
    repeat_interval=24 * H, pending_runs=1, no_data_alerting=frozenset({"recall_coverage"})
)


def test_no_data_keeps_a_firing_alert_and_remembers_since_when() -> None:
    """keep_state: a firing alert stays firing under no_data; no_data_since is its first window's start."""
    alert, steps = run([Status.BREACHED] + [Status.NO_DATA] * 6)
    assert alert.state is AlertState.FIRING and alert.cause == "breached"
    assert alert.no_data_since == T0  # the first no-data window is [T0, T0 + 4h)
    (repeat,) = [
        s.notification for s in steps if s.notification and s.notification.kind is Kind.REPEAT
    ]
    assert repeat.at == T0 + 24 * H and repeat.no_data_since == T0


def test_data_back_clears_no_data_since() -> None:
    """A window with data again (even too little to judge) ends the no-data stretch."""
    alert, _ = run([Status.BREACHED, Status.NO_DATA, Status.INSUFFICIENT_DATA])
    assert alert.no_data_since is None
    alert, _ = run([Status.BREACHED, Status.NO_DATA, Status.DISABLED])
    assert alert.no_data_since == T0  # disabled judged nothing: the stretch goes on


def test_no_data_with_alerting_opens_an_alert_of_its_own_kind() -> None:
    """alerting: no_data fires with cause no_data, reminds, and resolves when the data is ok again."""
    alert, steps = run(
        [Status.OK, Status.NO_DATA, Status.NO_DATA] + [Status.NO_DATA] * 6 + [Status.OK],
        rules=NO_DATA_ALERTING,
    )
    assert announced(steps) == [
        (Kind.FIRE, T0 + 4 * H),
        (Kind.REPEAT, T0 + 28 * H),
        (Kind.RESOLVE, T0 + 36 * H),
    ]
    fire = steps[1].notification
    assert fire is not None and fire.cause == "no_data" and fire.no_data_since == T0
    resolve = steps[-1].notification
    assert resolve is not None and resolve.cause == "no_data" and resolve.fired_for == 32 * H
    assert alert.state is AlertState.OK


def test_no_data_alerting_honours_pending_runs_and_other_checks_keep_state() -> None:
    """alerting needs pending_runs no-data windows too; a check not listed keeps its state."""
    rules = Rules(
        repeat_interval=24 * H, pending_runs=2, no_data_alerting=frozenset({"recall_coverage"})
    )
    _, steps = run([Status.NO_DATA, Status.NO_DATA], rules=rules)
    assert announced(steps) == [(Kind.FIRE, T0 + 4 * H)]
    _, steps = run([Status.NO_DATA] * 3)
    assert announced(steps) == []
