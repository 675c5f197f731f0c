"""The watchdog's own tables: the run log and history read back, alert states and the outbox
listed, a fresh or older database, and `status` over them (split from test_pipeline.py)."""

from __future__ import annotations

from alerts.lifecycle import STORE_CHECK
from alerts.pipeline import process
from alerts.records import alert_states, check_history, last_runs, outbox_backlog
from alerts.state import TABLES, create_table_sql, load_alerts
from alerts.testing import RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import SOURCE, T0, H, make_settings, report
from tests.alerts.test_pipeline import run
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.daemon.status import read_status, render_text


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
