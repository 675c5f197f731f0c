"""Delivery bounded against bad luck: huge Retry-After values, crashes mid-send, give-ups said.

Crashes are simulated in process: a receiver that raises `Killed` (a BaseException,
which the outbox does not catch, as it cannot catch SIGKILL) leaves the store as a
process killed mid-send would. tests/faults/test_process_faults.py kills real processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from alerts.base import Deadline, DeliveryError, Message
from alerts.outbox import enqueue, pending_rows
from alerts.pipeline import process
from alerts.records import outbox_backlog
from alerts.rows import OutboxStatus
from alerts.state import table
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H, make_settings, report, webhook_notifier
from tests.alerts.slack_standin import OK, SlackStandIn, rate_limited
from watchdog.core.settings import Settings
from watchdog.core.store import Store


class Killed(BaseException):
    """The process died here (SIGKILL cannot be caught; neither is this)."""


@dataclass
class DyingNotifier:
    """A receiver that posts each message, then dies before the answer the first `deaths` times."""

    deaths: int
    name: str = "chat"
    quiet_hours: None = None
    per_alert: bool = False
    posted: list[str] = field(default_factory=list)  # message ids, once per post

    def describe(self) -> str:
        return "chat (dying)"

    def send(self, message: Message, deadline: Deadline) -> None:
        self.posted.append(message.id)
        if self.deaths:
            self.deaths -= 1
            raise Killed


BREACH = {"recall_coverage": Status.BREACHED}


def test_a_retry_after_of_ages_holds_a_message_back_an_hour_at_most(
    store: Store, slack: SlackStandIn
) -> None:
    """A 429 asking to wait 99999999999s parks the message for an hour at most, not until 5195."""
    settings = make_settings()
    chat = webhook_notifier(slack)
    slack.reply(rate_limited(99999999999))
    first = process(store, settings, report(T0, BREACH), now=T0, notifiers={"slack": chat})
    assert first.delivery.pending == 1 and slack.delivered() == []
    [row] = pending_rows(store, settings)
    assert row.retry_at is not None and row.retry_at <= T0 + H
    slack.reply(OK)
    later = process(
        store, settings, report(T0 + 2 * H, BREACH), now=T0 + 2 * H, notifiers={"slack": chat}
    )
    assert len(later.delivery.delivered) == 1 and len(slack.delivered()) == 1


def test_a_row_parked_for_ages_by_an_older_version_goes_an_hour_after_its_attempt(
    store: Store, settings: Settings
) -> None:
    """A row an older version parked until 5195 is sent once an hour has passed since its attempt."""
    chat = RecordingNotifier(name="chat")
    chat.failure = lambda: DeliveryError("chat", "rate limited", retry_after=60)
    process(store, settings, report(T0, BREACH), now=T0, notifiers={"chat": chat})
    [row] = pending_rows(store, settings)
    enqueue(
        store, settings, [replace(row, retry_at=T0.replace(year=5195), version=row.version + 1)]
    )
    chat.recover()
    outcome = process(
        store, settings, report(T0 + 2 * H, BREACH), now=T0 + 2 * H, notifiers={"chat": chat}
    )
    assert len(outcome.delivery.delivered) == 1 and len(chat.sent) == 1


def test_a_message_dropped_for_its_age_is_said_to_be_given_up(store: Store) -> None:
    """A message dropped by alerts.max_delivery_age is said to be given up, never "retried"."""
    settings = make_settings({"alerts": {"max_delivery_age": "1d", "repeat_interval": "7d"}})
    chat = RecordingNotifier(name="chat")
    chat.fail_with("timed out")
    process(
        store, settings, report(T0, BREACH), now=T0, notifiers={"chat": chat}, timer=FakeTimer()
    )
    chat.recover()
    outcome = process(
        store,
        settings,
        report(T0 + 28 * H, {"recall_coverage": Status.NO_DATA}),
        now=T0 + 28 * H,
        notifiers={"chat": chat},
    )
    [line] = outcome.delivery.given_up
    assert "dropped 1 notification" in line and "will not be sent" in line
    assert line in outcome.errors and chat.sent == []


def crash_then_run(
    store: Store, settings: Settings, chat: DyingNotifier, runs: int
) -> list[BaseException | None]:
    """Evaluate the same breach `runs` times (a restart each), each maybe dying mid-send."""
    ends: list[BaseException | None] = []
    for _ in range(runs):
        try:
            process(store, settings, report(T0, BREACH), now=T0 + H, notifiers={"chat": chat})
        except Killed as killed:
            ends.append(killed)
        else:
            ends.append(None)
    return ends


def test_a_send_cut_short_by_a_crash_is_sent_once_more(store: Store) -> None:
    """After a crash mid-send the message goes once more at the next run: one duplicate, no loss."""
    settings = make_settings()
    chat = DyingNotifier(deaths=1)
    ends = crash_then_run(store, settings, chat, runs=3)
    assert [type(e) for e in ends] == [Killed, type(None), type(None)]
    assert len(chat.posted) == 2 and chat.posted[0] == chat.posted[1]
    [backlog] = outbox_backlog(store, settings)
    assert (backlog.delivered, backlog.pending, backlog.unconfirmed) == (1, 0, 0)


def test_a_message_whose_sends_crashes_cut_short_twice_is_given_up(store: Store) -> None:
    """Five crashes in a row mid-send post a message twice at most; then it is given up, said."""
    settings = make_settings()
    chat = DyingNotifier(deaths=5)
    ends = crash_then_run(store, settings, chat, runs=6)
    assert len(chat.posted) == 2  # whatever the number of crashes and restarts
    assert [type(e) for e in ends] == [Killed, Killed] + [type(None)] * 4
    [backlog] = outbox_backlog(store, settings)
    assert (backlog.pending, backlog.unconfirmed) == (0, 1)
    statuses = store.query(
        f"SELECT status, unconfirmed FROM {table(settings, 'outbox')} FINAL"
    ).rows
    assert statuses == [(OutboxStatus.UNCONFIRMED, 2)]


def test_giving_a_message_up_is_said_in_one_line(store: Store) -> None:
    """The run that gives up a message whose sends crashes cut short says so, once."""
    settings = make_settings()
    chat = DyingNotifier(deaths=2)
    crash_then_run(store, settings, chat, runs=2)
    outcome = process(store, settings, report(T0, BREACH), now=T0 + H, notifiers={"chat": chat})
    [line] = outcome.delivery.given_up
    assert "cut short twice" in line and "may have been posted" in line
    again = process(store, settings, report(T0, BREACH), now=T0 + H, notifiers={"chat": chat})
    assert again.delivery.given_up == () and len(chat.posted) == 2
