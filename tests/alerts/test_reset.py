"""Starting a source's alerts over (`alerts reset`), and what `alerts` says was notified.

`alerts.state.clear_source` deletes a source's alert states, run log and outbox from the
watchdog's own database (docs/alerts.md#starting-over-alerts-reset); `alert_states` reads,
per alert, the newest message a receiver took (`last_delivered`), which `alerts` shows as
LAST NOTIFIED.
"""

from __future__ import annotations

from alerts.lifecycle import Kind
from alerts.pipeline import process
from alerts.records import alert_states, last_runs, outbox_backlog
from alerts.state import clear_source, load_alerts, source_rows
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import SOURCE, T0, H, report
from tests.alerts.test_pipeline import run
from tests.builder import M, Scenario, unique_table
from watchdog.core.settings import Settings
from watchdog.core.store import Store

OTHER = "joelclaw.other_events"
BREACH = {"recall_coverage": Status.BREACHED}


def test_reset_clears_one_source_and_leaves_the_others(store: Store, settings: Settings) -> None:
    """`clear_source` deletes the source's alert states, run log and outbox; another source's stay."""
    run(store, settings, T0, BREACH, RecordingNotifier())
    process(store, settings, report(T0, BREACH, source=OTHER), now=T0, notifiers={})
    assert source_rows(store, settings, SOURCE) == {"alert_state": 2, "runs": 1, "outbox": 1}
    cleared = clear_source(store, settings, SOURCE)
    assert cleared == {"alert_state": 2, "runs": 1, "outbox": 1}
    assert load_alerts(store, settings, SOURCE) == {}
    assert last_runs(store, settings, 5, source=SOURCE) == []
    assert outbox_backlog(store, settings) == []
    assert set(load_alerts(store, settings, OTHER)) == {"recall_coverage", "store"}
    assert len(last_runs(store, settings, 5, source=OTHER)) == 1


def test_after_a_reset_an_earlier_time_is_judged_again(store: Store, settings: Settings) -> None:
    """A run at a later time makes an earlier one "already processed"; after a reset it fires."""
    run(store, settings, T0 + 8 * H, {"recall_coverage": Status.OK})
    assert run(store, settings, T0, BREACH, now=T0 + 8 * H).stale
    clear_source(store, settings, SOURCE)
    again = run(store, settings, T0, BREACH, now=T0 + 8 * H)
    assert not again.stale
    assert [(n.kind, n.check_id) for n in again.notifications] == [(Kind.FIRE, "recall_coverage")]


def test_reset_of_every_source_never_touches_the_telemetry(
    store: Store, settings: Settings
) -> None:
    """`clear_source(None)` empties the watchdog's tables of every source; the source table keeps
    every row."""
    telemetry = unique_table()
    scenario = Scenario()
    scenario.session("s1").starts(T0 - 3 * H).recalls(T0 - 3 * H + M)
    scenario.write(store, telemetry)
    before = store.query(f"SELECT count() FROM {telemetry}").rows[0][0]
    run(store, settings, T0, BREACH)
    process(store, settings, report(T0, BREACH, source=OTHER), now=T0, notifiers={})
    clear_source(store, settings, None)
    assert source_rows(store, settings, None) == {"alert_state": 0, "runs": 0, "outbox": 0}
    assert store.query(f"SELECT count() FROM {telemetry}").rows[0][0] == before > 0


def test_last_notified_is_empty_when_nothing_was_sent(store: Store, settings: Settings) -> None:
    """With no receiver, an alert that fired was announced but notified to no one: no
    `last_delivered`, whatever `last_notified_at` (the announcement) says."""
    process(store, settings, report(T0, BREACH), now=T0, notifiers={}, timer=FakeTimer())
    (firing,) = [r for r in alert_states(store, settings) if r.alert.firing]
    assert firing.alert.last_notified_at == T0
    assert firing.last_delivered is None


def test_last_notified_is_empty_when_every_send_failed(store: Store, settings: Settings) -> None:
    """A message still in the outbox (its sends failed) notified no one yet."""
    chat = RecordingNotifier()
    chat.fail_with("timed out")
    run(store, settings, T0, BREACH, chat)
    (firing,) = [r for r in alert_states(store, settings) if r.alert.firing]
    assert firing.pending_outbox == 1 and firing.last_delivered is None


def test_last_notified_is_the_time_of_the_message_delivered(
    store: Store, settings: Settings
) -> None:
    """A message a receiver took: `last_delivered` is the evaluation time it was about."""
    run(store, settings, T0, BREACH, RecordingNotifier())
    (firing,) = [r for r in alert_states(store, settings) if r.alert.firing]
    assert firing.last_delivered == T0
