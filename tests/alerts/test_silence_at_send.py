"""Silences apply when a message is sent, as Alertmanager mutes at notification time (issue 33
point 10): a silence added after the evaluation, or while a message waits in the outbox, keeps
it from every receiver, and the alert is announced when the silence ends."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime

from alerts.outbox import pending_rows
from alerts.pipeline import deliver
from alerts.records import alert_states, outbox_backlog
from alerts.rows import OutboxStatus
from alerts.silences import add_silence
from alerts.state import OUTBOX, table
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H
from tests.alerts.test_pipeline import run
from tests.builder import M, S
from watchdog.core.settings import Settings
from watchdog.core.store import Store

BOTH = {"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED}


def silence(store: Store, settings: Settings, check_id: str, now: datetime) -> None:
    add_silence(
        store,
        settings,
        check_id=check_id,
        ends_at=T0 + 6 * H,
        reason="deploying the fix",
        created_by="oncall",
        now=now,
    )


def retry(store: Store, settings: Settings, now: datetime, *notifiers: RecordingNotifier) -> None:
    deliver(
        lambda: contextlib.nullcontext(store),
        settings,
        now=now,
        notifiers={n.name: n for n in notifiers},
        timer=FakeTimer(),
    )


def statuses_of(store: Store, settings: Settings) -> dict[str, str]:
    rows = store.query(f"SELECT id, status FROM {table(settings, 'outbox')} FINAL ORDER BY id").rows
    return {str(i): str(s) for i, s in rows}


def test_a_silence_added_after_the_evaluation_time_holds_its_announcement(
    store: Store, settings: Settings
) -> None:
    """Judged at 04:00:00, silenced at 04:00:04, run at 04:00:08 (the delay): nothing is sent."""
    chat = RecordingNotifier()
    silence(store, settings, "recall_coverage", T0 + 4 * S)
    outcome = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat, now=T0 + 8 * S)
    assert chat.sent == [] and outcome.held == ("recall_coverage",)


def test_a_message_waiting_in_the_outbox_is_not_sent_once_silenced(
    store: Store, settings: Settings
) -> None:
    """The receiver was down; a silence added before the retry keeps the message from it, and
    the alert, still firing when the silence ends, is announced then."""
    chat = RecordingNotifier()
    chat.fail_with("connection refused")
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert chat.sent == [] and len(pending_rows(store, settings)) == 1
    silence(store, settings, "recall_coverage", T0 + M)
    chat.recover()
    retry(store, settings, T0 + 2 * M, chat)
    assert chat.sent == [] and pending_rows(store, settings) == []
    assert list(statuses_of(store, settings).values()) == [OutboxStatus.SILENCED.value]
    (record,) = [r for r in alert_states(store, settings) if r.alert.check_id == "recall_coverage"]
    assert record.alert.firing and record.silenced_until == T0 + 6 * H
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert chat.sent == []  # still silenced
    run(store, settings, T0 + 8 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert len(chat.sent) == 1
    assert "FIRING recall_coverage" in chat.sent[0].plain
    assert "a silence held this until now" in chat.sent[0].plain


def test_a_resolve_silenced_at_sending_is_sent_when_the_silence_ends(
    store: Store, settings: Settings
) -> None:
    """Chat was told it fires; the resolve waits for the silence, then says it resolved."""
    chat = RecordingNotifier()
    run(store, settings, T0 - 4 * H, {"recall_coverage": Status.BREACHED}, chat)
    chat.fail_with("connection refused")
    run(store, settings, T0, {"recall_coverage": Status.OK}, chat)
    silence(store, settings, "recall_coverage", T0 + M)
    chat.recover()
    retry(store, settings, T0 + 2 * M, chat)
    assert len(chat.sent) == 1  # the fire only
    run(store, settings, T0 + 8 * H, {"recall_coverage": Status.OK}, chat)
    assert len(chat.sent) == 2 and "RESOLVED recall_coverage" in chat.sent[1].plain


def test_every_receiver_leaves_out_the_silenced_alert_and_keeps_the_others(
    store: Store, settings: Settings
) -> None:
    """One grouped message (chat) and one per alert (a PagerDuty-like receiver), both waiting:
    a silence of one check drops its page and takes it out of the grouped message, which is
    rendered again with the other alone."""
    chat = RecordingNotifier("chat")
    pager = RecordingNotifier("pager", per_alert=True)
    for receiver in (chat, pager):
        receiver.fail_with("connection refused")
    run(store, settings, T0, BOTH, chat, pager)
    assert len(pending_rows(store, settings)) == 3
    silence(store, settings, "recall_coverage", T0 + M)
    for receiver in (chat, pager):
        receiver.recover()
    retry(store, settings, T0 + 2 * M, chat, pager)
    (grouped,) = chat.sent
    assert "1 firing" in grouped.plain and "FIRING observe_coverage" in grouped.plain
    assert "recall_coverage" not in grouped.plain and "recall_coverage" not in json.dumps(
        grouped.blocks
    )
    assert [a.check_id for a in grouped.alerts] == ["observe_coverage"]
    assert [[a.check_id for a in m.alerts] for m in pager.sent] == [["observe_coverage"]]
    rows = [
        OUTBOX.decode(r)
        for r in store.query(
            f"SELECT {OUTBOX.select()} FROM {table(settings, 'outbox')} FINAL"
        ).dicts()
    ]
    by_status = sorted((r.status.value, r.notifier, r.checks) for r in rows)
    assert by_status == [
        ("delivered", "chat", ("observe_coverage",)),
        ("delivered", "pager", ("observe_coverage",)),
        ("silenced", "pager", ("recall_coverage",)),
    ]
    pager_backlog = next(b for b in outbox_backlog(store, settings) if b.notifier == "pager")
    assert (pager_backlog.silenced, pager_backlog.to_json()["silenced"]) == (1, 1)
    assert "1 silenced (a silence added before they were sent)" in pager_backlog.given_up()
    # The silenced alert is announced to both when the silence ends; the other is not again.
    run(store, settings, T0 + 8 * H, BOTH, chat, pager)
    assert [a.check_id for a in chat.sent[-1].alerts] == ["recall_coverage"]
    assert [[a.check_id for a in m.alerts] for m in pager.sent[1:]] == [["recall_coverage"]]
