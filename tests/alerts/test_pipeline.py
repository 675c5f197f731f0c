"""The alert pipeline against the embedded store: state, outbox and run log in ClickHouse; those
tables read back (run log, history, alert states, outbox, `status`), on a fresh or older store."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

import pytest

from alerts.base import Failure
from alerts.lifecycle import STORE_CHECK, AlertState
from alerts.outbox import pending_rows
from alerts.pipeline import ProcessOutcome, process, process_store_error
from alerts.records import alert_states, check_history, last_runs, outbox_backlog
from alerts.silences import add_silence, list_silences, remove_silence
from alerts.state import TABLES, create_table_sql, load_alerts
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status, Window
from tests.alerts.conftest import SOURCE, T0, H, make_settings, report, result
from tests.builder import M, S, Scenario, evaluate
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.daemon.status import read_status, render_text


def run(
    store: Store,
    settings: Settings,
    at: datetime,
    statuses: Mapping[str, Status],
    *notifiers: RecordingNotifier,
    now: datetime | None = None,
) -> ProcessOutcome:
    """One run judged at `at` (and run at `now`, default `at`) sending to `notifiers`."""
    return process(
        store,
        settings,
        report(at, statuses),
        now=now or at,
        notifiers={n.name: n for n in notifiers},
        timer=FakeTimer(),
    )


def items(notifier: RecordingNotifier) -> list[list[str]]:
    """Per message sent, its announcements as "LABEL check_id" (from the plain text)."""
    return [
        [
            f"{m.group(1)} {m.group(2)}"
            for m in re.finditer(r"^- ([A-Z ]+) (\S+) \[", sent.plain, re.M)
        ]
        for sent in notifier.sent
    ]


def test_fire_once_then_rerun_sends_nothing(store: Store, settings: Settings) -> None:
    """A breach sends one message; evaluating the same `at` again sends nothing new."""
    chat = RecordingNotifier()
    first = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert [n.check_id for n in first.notifications] == ["recall_coverage"]
    assert len(chat.sent) == 1 and "FIRING recall_coverage" in chat.sent[0].plain
    again = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert again.stale and again.notifications == () and len(chat.sent) == 1


def test_one_message_groups_every_transition_of_a_run(store: Store, settings: Settings) -> None:
    """Two checks firing in one evaluation make one message, not two."""
    chat = RecordingNotifier()
    run(
        store,
        settings,
        T0,
        {"recall_coverage": Status.BREACHED, "observe_coverage": Status.ERROR},
        chat,
    )
    assert len(chat.sent) == 1
    assert (
        "recall_coverage" in chat.sent[0].plain
        and "could not evaluate observe_coverage" in chat.sent[0].plain
    )


def test_still_breached_repeats_after_repeat_interval(store: Store) -> None:
    """With repeat_interval 8h, a breach lasting 12h is announced at 0h and reminded at 8h."""
    settings = make_settings({"alerts": {"repeat_interval": "8h"}})
    chat = RecordingNotifier()
    for i in range(4):
        run(store, settings, T0 + 4 * i * H, {"recall_coverage": Status.BREACHED}, chat)
    assert items(chat) == [["FIRING recall_coverage"], ["STILL FIRING recall_coverage"]]


def test_transitions_are_judged_at_the_evaluation_time(store: Store, settings: Settings) -> None:
    """A replay long after the fact (wall clock months later) repeats by `at`, not by `now`."""
    chat = RecordingNotifier()
    later = T0 + 2000 * H
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat, now=later)
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, chat, now=later)
    assert len(chat.sent) == 1


def test_resolve_once_with_duration(store: Store, settings: Settings) -> None:
    """Back to ok resolves once, saying how long it fired; further oks say nothing."""
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, chat)
    run(store, settings, T0 + 8 * H, {"recall_coverage": Status.OK}, chat)
    run(store, settings, T0 + 12 * H, {"recall_coverage": Status.OK}, chat)
    assert len(chat.sent) == 2
    assert "recall_coverage resolved after 8h" in chat.sent[1].plain
    assert "Fired for 8h" in chat.sent[1].plain


def test_pending_runs_opens_after_consecutive_breaches(store: Store) -> None:
    """pending_runs 2: the first breach waits, the second opens the alert."""
    settings = make_settings({"alerts": {"pending_runs": 2}})
    chat = RecordingNotifier()
    first = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert first.pending == ("recall_coverage",) and chat.sent == []
    second = run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert second.firing == ("recall_coverage",) and len(chat.sent) == 1


def test_error_alert_is_worded_as_error(store: Store, settings: Settings) -> None:
    """An error fires its own alert: "the watchdog could not evaluate X", not a breach."""
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.ERROR}, chat)
    assert "the watchdog could not evaluate recall_coverage" in chat.sent[0].plain
    assert "breached" not in chat.sent[0].plain


def test_no_data_keeps_a_firing_alert(store: Store, settings: Settings) -> None:
    """no_data after a breach neither resolves nor re-announces."""
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    outcome = run(store, settings, T0 + 4 * H, {"recall_coverage": Status.NO_DATA}, chat)
    assert outcome.firing == ("recall_coverage",) and len(chat.sent) == 1


def test_state_survives_a_new_store_handle(store: Store, settings: Settings) -> None:
    """State lives in the store: a fresh pipeline run (as after a restart) sends nothing new."""
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    restarted = RecordingNotifier()
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, restarted)
    assert restarted.sent == []
    assert load_alerts(store, settings, SOURCE)["recall_coverage"].state is AlertState.FIRING


def test_chat_down_then_up_delivers_everything_in_order_once(
    store: Store, settings: Settings
) -> None:
    """Messages written while chat is down go out at the next run, oldest first, exactly once."""
    chat = RecordingNotifier()
    chat.fail_with("Slack answered internal_error (HTTP 500)")
    down1 = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    down2 = run(
        store,
        settings,
        T0 + 4 * H,
        {"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED},
        chat,
    )
    assert down1.delivery.pending == 1 and down2.delivery.pending == 2
    assert chat.attempts == 2  # one attempt per run, the later row waits behind the failed one
    assert len(down2.errors) == 1 and "will retry" in down2.errors[0]
    chat.recover()
    up = run(
        store,
        settings,
        T0 + 8 * H,
        {"recall_coverage": Status.OK, "observe_coverage": Status.BREACHED},
        chat,
    )
    assert items(chat) == [
        ["FIRING recall_coverage"],
        ["FIRING observe_coverage"],
        ["RESOLVED recall_coverage"],
    ]
    assert up.delivery.errors == () and pending_rows(store, settings) == []
    run(store, settings, T0 + 12 * H, {"observe_coverage": Status.BREACHED}, chat)
    assert len(chat.sent) == 3


def test_permanent_error_is_reported_once_without_a_storm(store: Store, settings: Settings) -> None:
    """A bad token costs one attempt per run and one line, whatever the backlog."""
    chat = RecordingNotifier()
    chat.fail_with("invalid_auth: check alerts.slack.token", Failure.PERMANENT)
    for i in range(3):
        outcome = run(
            store,
            settings,
            T0 + 4 * i * H,
            {"recall_coverage": Status.BREACHED if i % 2 == 0 else Status.OK},
            chat,
        )
    assert chat.attempts == 3
    assert len(outcome.errors) == 1 and "invalid_auth" in outcome.errors[0]
    assert "permanent" in outcome.errors[0] and outcome.delivery.pending == 3


def test_rejected_message_is_set_aside_and_does_not_block(store: Store, settings: Settings) -> None:
    """A message the service rejects as malformed is set aside; the next ones still go out."""
    chat = RecordingNotifier()
    chat.fail_with("Slack rejected the message: invalid_blocks", Failure.REJECTED)
    outcome = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert outcome.delivery.rejected == 1 and outcome.delivery.pending == 0
    chat.recover()
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.OK}, chat)
    assert len(chat.sent) == 1
    assert outbox_backlog(store, settings)[0].rejected == 1


def test_undelivered_past_max_delivery_age_is_dropped(store: Store) -> None:
    """A row older than alerts.max_delivery_age is dropped with an error line and counted."""
    settings = make_settings({"alerts": {"max_delivery_age": "1d", "repeat_interval": "7d"}})
    chat = RecordingNotifier()
    chat.fail_with("timed out")
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    chat.recover()
    outcome = run(store, settings, T0 + 28 * H, {"recall_coverage": Status.NO_DATA}, chat)
    assert outcome.delivery.dropped == 1 and chat.sent == []
    assert any(
        "dropped 1 notification" in line and "max_delivery_age" in line for line in outcome.errors
    )
    assert outbox_backlog(store, settings)[0].dropped == 1


def test_silence_holds_then_releases_a_still_firing_alert(store: Store, settings: Settings) -> None:
    """A silenced alert changes state and sends nothing; still firing at expiry, it is announced then."""
    chat = RecordingNotifier()
    add_silence(
        store,
        settings,
        check_id="recall_coverage",
        ends_at=T0 + 6 * H,
        reason="deploying the fix",
        created_by="oncall",
        now=T0 - H,
    )
    held = run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    assert (
        held.held == ("recall_coverage",)
        and held.firing == ("recall_coverage",)
        and chat.sent == []
    )
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert chat.sent == []
    released = run(store, settings, T0 + 8 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert [n.check_id for n in released.notifications] == ["recall_coverage"]
    assert "a silence held this until now" in chat.sent[0].plain


def test_silence_all_covers_every_check_and_can_be_removed(
    store: Store, settings: Settings
) -> None:
    """`all` silences every alert; removing it lets the next run announce."""
    chat = RecordingNotifier()
    silence = add_silence(
        store,
        settings,
        check_id="all",
        ends_at=T0 + 48 * H,
        reason="maintenance",
        created_by="ops",
        now=T0,
    )
    run(
        store,
        settings,
        T0,
        {"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED},
        chat,
    )
    assert chat.sent == []
    records = alert_states(store, settings, now=T0)
    assert {r.alert.check_id: r.silenced_until for r in records if r.alert.firing} == {
        "recall_coverage": T0 + 48 * H,
        "observe_coverage": T0 + 48 * H,
    }
    assert remove_silence(store, settings, silence.id, T0 + H) is not None
    assert remove_silence(store, settings, silence.id, T0 + H) is None
    assert list_silences(store, settings)[0].removed_at == T0 + H
    run(
        store,
        settings,
        T0 + 4 * H,
        {"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED},
        chat,
    )
    assert len(chat.sent) == 1


def test_quiet_hours_hold_warnings_but_not_criticals(store: Store, settings: Settings) -> None:
    """In quiet hours a critical goes out at once; a warning waits for the next run after they end."""
    chat = RecordingNotifier(quiet_hours=QuietHours.parse("22:00-07:00", "UTC"))
    night = T0  # 04:00 UTC
    outcome = run(
        store,
        settings,
        night,
        {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED},
        chat,
    )
    assert len(chat.sent) == 1 and "recall_coverage" in chat.sent[0].plain
    assert "recall_latency_p95" not in chat.sent[0].plain
    assert outcome.delivery.held == 1
    still_night = run(store, settings, night + 2 * H, {"recall_coverage": Status.BREACHED}, chat)
    assert len(chat.sent) == 1 and still_night.delivery.held == 1
    run(store, settings, night + 4 * H, {"recall_coverage": Status.BREACHED}, chat)  # 08:00
    assert len(chat.sent) == 2 and "recall_latency_p95" in chat.sent[1].plain


def test_store_error_fires_the_store_alert_and_a_good_run_resolves_it(
    store: Store, settings: Settings
) -> None:
    """process_store_error fires `store` ("could not read the source"); the next process resolves it."""
    chat = RecordingNotifier()
    window = Window(at=T0, length=4 * H, lookback=24 * H)
    outcome = process_store_error(
        store,
        settings,
        window,
        "table joelclaw.otel_events not found",
        now=T0,
        notifiers={chat.name: chat},
        duration_s=0.4,
    )
    assert outcome.firing == (STORE_CHECK,)
    assert f"the watchdog could not read the source {SOURCE}" in chat.sent[0].plain
    assert last_runs(store, settings, 1)[0].problem == "table joelclaw.otel_events not found"
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.OK}, chat)
    assert f"the watchdog can read the source {SOURCE} again after 4h" in chat.sent[1].plain


def test_real_report_with_a_hostile_session_id(store: Store, settings: Settings) -> None:
    """End to end from telemetry: a session id `<!channel>` reaches chat escaped, never as a mention."""
    scenario = Scenario()
    start = T0 - 3 * H
    scenario.session("<!channel>").starts(start).ends(start + 10 * M).observes(start + 11 * M)
    scenario.session("ok-1").starts(start).recalls(start + S).ends(start + 10 * M).observes(
        start + 11 * M
    )
    evaluated = evaluate(store, scenario, T0)
    assert evaluated.checks["recall_coverage"].status is Status.BREACHED
    chat = RecordingNotifier()
    process(store, settings, evaluated, now=T0, notifiers={chat.name: chat}, timer=FakeTimer())
    message = chat.sent[0]
    assert "<!channel>" not in message.text and "&lt;!channel&gt;" in message.text
    assert "<!channel>" not in str(message.blocks) and "&lt;!channel&gt;" in str(message.blocks)
    assert "<!channel>" in message.plain  # the stdout form is not Slack: shown as is


@pytest.mark.parametrize("status", [Status.INSUFFICIENT_DATA, Status.DISABLED])
def test_unknown_status_on_a_fresh_alert_sends_nothing(
    store: Store, settings: Settings, status: Status
) -> None:
    """insufficient_data and disabled on a new alert leave it ok and silent."""
    chat = RecordingNotifier()
    outcome = run(store, settings, T0, {"recall_coverage": status}, chat)
    assert outcome.firing == () and chat.sent == []
    assert result("recall_coverage", status).status is status


def test_with_base_url_every_message_links_to_the_window_page(store: Store) -> None:
    """`report.base_url` set: the message of a run links to `<base_url>/reports/<window-end>`."""
    settings = make_settings({"report": {"base_url": "https://watchdog.example/"}})
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    (sent,) = chat.sent
    link = "https://watchdog.example/reports/20261128T040000Z"
    assert sent.plain.splitlines()[-1] == f"Report: {link}"
    assert f"Report: <{link}>" in sent.text
    assert f"<{link}|" in sent.blocks[1]["elements"][-1]["text"]


def test_the_store_alert_carries_no_link_to_a_page_never_written(store: Store) -> None:
    """A window whose source could not be read has no page: its `store` alert links nowhere."""
    settings = make_settings({"report": {"base_url": "https://watchdog.example"}})
    chat = RecordingNotifier()
    window = Window(at=T0, length=4 * H, lookback=24 * H)
    process_store_error(
        store, settings, window, "table t not found", now=T0, notifiers={chat.name: chat}
    )
    (sent,) = chat.sent
    assert "reports/" not in sent.plain and "Report" not in sent.plain


def test_no_data_alerting_fires_an_alert_of_its_own_and_resolves_when_ok(store: Store) -> None:
    """`[checks.<id>] no_data = "alerting"`: nothing to judge fires "has no data"; ok resolves it."""
    settings = make_settings({"checks": {"recall_coverage": {"no_data": "alerting"}}})
    chat = RecordingNotifier()
    run(
        store,
        settings,
        T0,
        {"recall_coverage": Status.NO_DATA, "observe_coverage": Status.NO_DATA},
        chat,
    )
    (fired,) = chat.sent
    assert "NO DATA recall_coverage" in fired.plain and "observe_coverage" not in fired.plain
    assert load_alerts(store, settings, SOURCE)["recall_coverage"].cause == "no_data"
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.OK}, chat)
    assert "recall_coverage has data again after 4h" in chat.sent[1].plain


def test_a_reminder_under_no_data_says_since_when(store: Store) -> None:
    """keep_state: the reminder of an alert whose windows had nothing to judge says "no data since"."""
    settings = make_settings({"alerts": {"repeat_interval": "8h"}})
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    for i in (1, 2):
        run(store, settings, T0 + 4 * i * H, {"recall_coverage": Status.NO_DATA}, chat)
    assert items(chat) == [["FIRING recall_coverage"], ["STILL FIRING recall_coverage"]]
    assert "but no data since 2026-11-28T04:00:00Z" in chat.sent[1].plain
    assert load_alerts(store, settings, SOURCE)["recall_coverage"].no_data_since == T0


# ---- the watchdog's own tables: the run log and history read back, alert states and the
# outbox listed, a fresh or older database, and `status` over them.


def test_run_log_and_history_read_back(store: Store, settings: Settings) -> None:
    """Each run is logged with its window and per-check results; history reads one check oldest first."""
    chat = RecordingNotifier()
    run(
        store,
        settings,
        T0,
        {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.OK},
        chat,
    )
    process(
        store,
        settings,
        report(T0 + 4 * H, {"recall_coverage": Status.OK}),
        now=T0 + 4 * H,
        notifiers={},
        run_status="catch-up",
        duration_s=1.5,
    )
    runs = last_runs(store, settings, 5)
    assert [r.at for r in runs] == [T0 + 4 * H, T0]
    assert runs[0].status == "catch-up" and runs[0].duration_s == 1.5
    assert runs[1].window_start == T0 - 4 * H and runs[1].window_end == T0
    assert runs[1].checks["recall_coverage"]["status"] == "breached"
    assert runs[1].checks["recall_coverage"]["value"] == 3 and runs[1].notifications == 1
    history = check_history(store, settings, "recall_coverage", 10)
    assert [(p.at, p.status, p.value, p.target) for p in history] == [
        (T0, "breached", 3.0, 0.0),
        (T0 + 4 * H, "ok", 0.0, 0.0),
    ]
    assert [p.status for p in check_history(store, settings, STORE_CHECK, 10)] == ["ok", "ok"]


def test_alert_states_list_firing_since_notified_and_outbox(
    store: Store, settings: Settings
) -> None:
    """alert_states shows firing since, last notified and the outbox rows waiting for each alert."""
    chat = RecordingNotifier()
    chat.fail_with("timed out")
    run(
        store,
        settings,
        T0,
        {"recall_coverage": Status.BREACHED, "observe_coverage": Status.OK},
        chat,
    )
    records = {r.alert.check_id: r for r in alert_states(store, settings)}
    firing = records["recall_coverage"]
    assert firing.alert.firing and firing.alert.fired_at == T0
    assert firing.alert.last_notified_at == T0 and firing.pending_outbox == 1
    assert not records["observe_coverage"].alert.firing
    backlog = outbox_backlog(store, settings, now=T0)
    assert [(b.notifier, b.pending, b.oldest_pending) for b in backlog] == [("recording", 1, T0)]


def test_read_helpers_on_a_fresh_database_are_empty(store: Store) -> None:
    """Before the first run, the read helpers answer empty and create nothing."""
    settings = make_settings()
    assert last_runs(store, settings, 3) == []
    assert alert_states(store, settings) == []
    assert outbox_backlog(store, settings) == []
    assert check_history(store, settings, "recall_coverage", 3) == []
    found = store.query(
        "SELECT count() FROM system.databases WHERE name = {db:String}",
        {"db": settings.store.database},
    ).rows
    assert found == [(0,)]


def test_tables_live_in_their_own_database(store: Store, settings: Settings) -> None:
    """The pipeline creates its four tables in store.database and nothing anywhere else."""
    before = set(
        store.query("SELECT database, name FROM system.tables WHERE database != 'system'").rows
    )
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, RecordingNotifier())
    after = set(
        store.query("SELECT database, name FROM system.tables WHERE database != 'system'").rows
    )
    assert after - before == {(settings.store.database, name) for name in TABLES}


# alert_state as first released: without the columns added since (no_data_since, inhibited_by).
OLD_ALERT_STATE = {
    k: v for k, v in TABLES["alert_state"].columns.items() if k not in TABLES["alert_state"].added
}


def test_a_store_from_before_no_data_since_is_read_then_migrated(store: Store) -> None:
    """alert_state created with the old DDL: read as it is, then the pipeline adds the column."""
    settings = make_settings()
    database = settings.store.database
    store.command(f"CREATE DATABASE `{database}`")
    columns = ",\n".join(f"{c} {t}" for c, t in OLD_ALERT_STATE.items())
    store.command(
        f"CREATE TABLE `{database}`.alert_state ({columns})"
        " ENGINE = ReplacingMergeTree(version) ORDER BY (source, check_id)"
    )
    for name in ("outbox", "runs", "silences"):
        store.command(create_table_sql(settings, name))
    firing = {
        "source": SOURCE,
        "check_id": "recall_coverage",
        "state": "firing",
        "cause": "breached",
        "streak": 1,
        "since": T0,
        "fired_at": T0,
        "last_at": T0,
        "last_status": "breached",
        "last_value": 3.0,
        "target": 0.0,
        "severity": "critical",
        "summary": "3 sessions started without recall",
        "notified_state": "firing",
        "last_notified_at": T0,
        "silenced_until": None,
        "updated_at": T0,
        "version": 1,
    }
    assert list(firing) == list(OLD_ALERT_STATE)
    store.insert(f"`{database}`.alert_state", [list(firing.values())], list(firing))
    (record,) = alert_states(store, settings)  # read-only: no column added, none needed
    assert record.alert.firing and record.alert.no_data_since is None
    assert record.alert.inhibited_by == ""
    chat = RecordingNotifier()
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.NO_DATA}, chat)
    alert = load_alerts(store, settings, SOURCE)["recall_coverage"]
    assert alert.firing and alert.no_data_since == T0


def test_status_and_alerts_say_no_data_since_for_a_firing_alert(store: Store) -> None:
    """`status` shows "no data since" for a firing alert, never the no-data summary as its breach."""
    settings = make_settings()
    chat = RecordingNotifier()
    run(store, settings, T0, {"recall_coverage": Status.BREACHED}, chat)
    run(store, settings, T0 + 4 * H, {"recall_coverage": Status.NO_DATA}, chat)
    status = read_status(store, settings, T0 + 4 * H, 5)
    (line,) = [x for x in render_text(status).splitlines() if x.startswith("  recall_coverage")]
    assert line == (
        f"  recall_coverage (critical) on {SOURCE} since 2026-11-28T04:00:00Z:"
        " no data since 2026-11-28T04:00:00Z (latest window: nothing to judge in the window)"
    )
    (firing,) = status.to_json()["firing_alerts"]
    assert firing["no_data_since"] == "2026-11-28T04:00:00Z"
