"""The daemon: aligned windows, catch-up, restart, a store that cannot be opened, reload, a stuck tick.

The daemon runs in this process, its collaborators handed in
(tests/daemon_rig.py); each test ticks it at the instants it chooses and
reads back the run log, the spool and what Slack received; each has a
watchdog database and a data directory of its own. A tick's store work in
its own process (`ChildTicks`) is tested against a store this process holds
locked. status and http: tests/test_daemon_views.py; the real process:
tests/test_daemon_process.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from alerts.lease import Lease, holder_name
from alerts.testing import RecordingNotifier
from tests.alerts.slack_standin import SlackStandIn
from tests.builder import M
from tests.daemon_rig import (
    DELAY,
    JUDGED,
    NO_SLOS,
    STORE_DOWN,
    Rig,
    end,
    hold_first_answer,
    judged_lines,
    new_rig,
    outage,
    wait_until,
    window,
    write_source,
)
from tests.fakes import LOCKED, MovableClock
from watchdog.core.errors import ConfigError
from watchdog.core.links import stamp
from watchdog.core.schedule import Schedule
from watchdog.core.settings import (
    CheckOverride,
    ReportSettings,
    ScheduleSettings,
    Settings,
    settings_from_mapping,
)
from watchdog.core.store import Store
from watchdog.core.times import rfc3339
from watchdog.daemon.child import ChildCrashed, ChildTicks
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.spool import Spool
from watchdog.daemon.telemetry import Telemetry
from watchdog.daemon.tick import TickRequest
from watchdog.daemon.trigger import AlignedTrigger
from watchdog.report.files import report_dir
from watchdog.runner.plugins import PLUGINS


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return write_source(store)


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@pytest.fixture
def make_rig(store: Store, source: str, slack: SlackStandIn, tmp_path: Path) -> Callable[..., Rig]:
    """Hourly windows judged 2m after they end; freshness target 10m; Slack at the stand-in; no
    SLOs (nothing here is about them: tests/test_slo_daemon.py), so no ledger catch-up."""
    return lambda **schedule: new_rig(store, source, slack, tmp_path, slo=NO_SLOS, **schedule)


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


@pytest.fixture
def daemon_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The daemon's log lines so far."""
    caplog.set_level(logging.INFO, logger="watchdog")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]


# ---- the schedule's trigger ---------------------------------------------------------------


def test_the_trigger_fires_delay_after_each_aligned_window_end() -> None:
    """APScheduler's trigger: first fire at the next end + delay, then one per window, no gap."""
    trigger = AlignedTrigger(
        Schedule.from_settings(ScheduleSettings.model_validate({"every": "1h", "delay": "2m"}))
    )
    fires: list[datetime] = []
    fire = trigger.get_next_fire_time(None, end(4) + 30 * M)
    while fire is not None and len(fires) < 4:
        fires.append(fire)
        fire = trigger.get_next_fire_time(fire, fire)
    assert fires == [end(h) + DELAY for h in (5, 6, 7, 8)]
    assert trigger.get_next_fire_time(None, end(5) + DELAY) == end(5) + DELAY  # due now: now


# ---- windows, catch-up, restart -----------------------------------------------------------


def test_consecutive_windows_are_each_judged_once_and_the_breach_reaches_slack_once(
    rig: Rig,
) -> None:
    """Fired at each window's end + delay (and in between): every window judged once, in order."""
    daemon = rig.daemon()
    for at in (end(5) + DELAY, end(5) + 30 * M, end(6) + DELAY, end(7) + DELAY, end(7) + 3 * M):
        rig.tick(daemon, at)
    assert rig.windows() == [window(5), window(6), window(7)]
    runs = rig.status().runs
    assert all(r.status == "breached" and r.problem == "" for r in runs)
    assert all(r.checks["telemetry_freshness"]["status"] == "breached" for r in runs)
    texts = rig.slack_texts()
    assert len(texts) == 1, texts  # fired once, still firing: no new message
    assert "telemetry_freshness" in texts[0]


def test_restart_judges_each_missed_window_once_oldest_first(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """Down from 6:02 to 9:02: a new daemon catches up [6,7) and [7,8) in order, then judges [8,9)."""
    first = rig.daemon()
    rig.tick(first, end(5) + DELAY)
    rig.tick(first, end(6) + DELAY)
    second = rig.daemon()  # a restart: nothing carried over but the store and the spool
    rig.tick(second, end(9) + DELAY)
    assert judged_lines(daemon_log()) == [
        ("judged", rfc3339(end(4)), rfc3339(end(5))),
        ("judged", rfc3339(end(5)), rfc3339(end(6))),
        ("caught up", rfc3339(end(6)), rfc3339(end(7))),
        ("caught up", rfc3339(end(7)), rfc3339(end(8))),
        ("judged", rfc3339(end(8)), rfc3339(end(9))),
    ]
    assert rig.windows() == [window(h) for h in (5, 6, 7, 8, 9)]


def test_catch_up_beyond_max_catchup_judges_the_newest_and_counts_the_skipped(
    make_rig: Callable[..., Rig], daemon_log: Callable[[], list[str]]
) -> None:
    """Down from 5:02 to 12:02 with max_catchup 2: [9,10) to [11,12) judged, four counted as skipped."""
    rig = make_rig(max_catchup=2)
    rig.tick(rig.daemon(), end(5) + DELAY)
    rig.tick(rig.daemon(), end(12) + DELAY)
    assert rig.windows() == [window(h) for h in (5, 10, 11, 12)]
    (skipped,) = [line for line in daemon_log() if line.startswith("catch-up:")]
    assert skipped == (
        "catch-up: 6 windows were missed, more than schedule.max_catchup = 2: the 4 oldest"
        f" (ending {rfc3339(end(6))} to {rfc3339(end(9))}) are not judged; judging the 2 newest"
        " and the one due now"
    )


# ---- the store cannot be opened -----------------------------------------------------------


def test_a_store_that_cannot_be_opened_spools_the_runs_and_tells_slack_once(rig: Rig) -> None:
    """Two ticks on a locked store: both error runs spooled, the `store` alert sent directly once."""
    outage(rig)
    spool = Spool.for_settings(rig.settings)
    assert [(r.at, r.problem) for r in spool.runs] == [
        (end(6), LOCKED.problem),
        (end(7), LOCKED.problem),
    ]
    assert spool.told == {"slack"}
    store_alerts = [t for t in rig.slack_texts() if STORE_DOWN in t]
    assert len(store_alerts) == 1, rig.slack_texts()
    assert "held by process 4242" in store_alerts[0]


def test_a_restart_during_an_outage_does_not_announce_it_again(rig: Rig) -> None:
    """The spool remembers that Slack was told: a new daemon on the locked store stays quiet."""
    outage(rig)
    restarted = rig.daemon()
    rig.tick(restarted, end(8) + DELAY)
    assert [r.at for r in Spool.for_settings(rig.settings).runs] == [end(6), end(7), end(8)]
    assert len([t for t in rig.slack_texts() if STORE_DOWN in t]) == 1


def test_recovery_writes_the_spool_into_the_run_log_and_judges_the_missed_windows(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """Store back at 7:03: the spooled runs recorded, [5,6) and [6,7) judged; then it resolves."""
    daemon = outage(rig)
    rig.opener.recover()
    rig.tick(daemon, end(7) + 3 * M)
    assert "the store is back: 2 spooled error run(s) written to the run log" in daemon_log()
    spool = Spool.for_settings(rig.settings)
    assert not spool and not spool.path.exists()
    runs = list(reversed(rig.status().runs))
    assert [(r.window_start, r.window_end) for r in runs] == [window(5), window(6), window(7)]
    assert all(r.problem == "" and r.status == "breached" for r in runs)  # judged after all
    assert rig.status().to_json()["spool"] == {"error_runs": 0, "since": None}

    rig.tick(daemon, end(8) + DELAY)
    texts = rig.slack_texts()
    assert len([t for t in texts if STORE_DOWN in t]) == 1, texts
    assert any("resolved" in t.lower() and "store" in t for t in texts), texts
    assert [a.alert.check_id for a in rig.status().firing()] == ["telemetry_freshness"]


def test_with_base_url_the_daemon_links_each_message_to_its_window_page(rig: Rig) -> None:
    """`report.base_url` set: the daemon's Slack message links to `<base_url>/reports/<window-end>`."""
    report = ReportSettings(base_url="https://watchdog.example")
    rig.settings = rig.settings.model_copy(update={"report": report})
    rig.tick(rig.daemon(pages=True), end(5) + DELAY)
    (sent,) = rig.slack.delivered()
    link = f"https://watchdog.example/reports/{stamp(end(5))}"
    assert sent.text.splitlines()[-1] == f"Report: <{link}>"
    assert f"<{link}|" in sent.body["blocks"][1]["elements"][-1]["text"]
    assert (report_dir(rig.settings) / "reports" / f"{stamp(end(5))}.html").exists()


# ---- SIGHUP: reload the config --------------------------------------------------------------


@dataclass
class ConfigFile:
    """What loading the config gives now: settings, or the error of an invalid file."""

    now: Settings | Exception

    def __call__(self) -> Settings:
        if isinstance(self.now, Exception):
            raise self.now
        return self.now


def relaxed(settings: Settings) -> Settings:
    """The same config with the freshness target raised to 30 days: the breach resolves."""
    checks = {"telemetry_freshness": CheckOverride(target=30 * 86400)}
    return settings.model_copy(update={"checks": checks})


def freshness_target(rig: Rig, hour: int) -> float:
    """The freshness target the run of the window ending at `hour` judged with."""
    (run,) = [r for r in rig.status().runs if r.window_end == end(hour)]
    return float(run.checks["telemetry_freshness"]["target"])


def test_a_reload_is_taken_by_the_next_run(rig: Rig, daemon_log: Callable[[], list[str]]) -> None:
    """SIGHUP between runs: the new config is validated, logged, and judges the next window."""
    config = ConfigFile(rig.settings)
    daemon = rig.daemon(reload=config)
    rig.tick(daemon, end(5) + DELAY)
    config.now = relaxed(rig.settings)
    assert daemon.reload()
    assert "SIGHUP: config reloaded (changed: checks); the next run uses it" in daemon_log()
    rig.tick(daemon, end(6) + DELAY)
    assert (freshness_target(rig, 5), freshness_target(rig, 6)) == (600, 30 * 86400)
    texts = rig.slack_texts()
    assert len(texts) == 2 and "telemetry_freshness resolved" in texts[1], texts


def test_an_invalid_config_is_logged_in_one_line_and_the_running_one_stays(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """SIGHUP with a broken file: one error line naming the key; the next run judges as before."""
    config = ConfigFile(rig.settings)
    daemon = rig.daemon(reload=config)
    rig.tick(daemon, end(5) + DELAY)
    config.now = ConfigError(
        "checks.telemetry_freshness.target", "must be a number", origin="x.toml"
    )
    assert not daemon.reload()
    (line,) = [x for x in daemon_log() if x.startswith("SIGHUP")]
    assert line == (
        "SIGHUP: config not reloaded, the running one stays:"
        " x.toml: checks.telemetry_freshness.target: must be a number"
    )
    rig.tick(daemon, end(6) + DELAY)
    assert freshness_target(rig, 6) == 600 and len(rig.slack_texts()) == 1


def test_a_run_in_progress_finishes_with_the_config_it_started_with(rig: Rig) -> None:
    """SIGHUP while a run waits on Slack: that run keeps the old config, the next takes the new."""
    config = ConfigFile(rig.settings)
    daemon = rig.daemon(reload=config)
    received, release = hold_first_answer(rig.slack)
    rig.clock.now = end(5) + DELAY
    running = threading.Thread(target=daemon.tick)
    running.start()
    try:
        wait_until(received.is_set, "the first message")
        config.now = relaxed(rig.settings)
        assert daemon.reload()
        assert daemon.settings is rig.settings  # taken by the next run, not this one
    finally:
        release.set()
        running.join()
    rig.tick(daemon, end(6) + DELAY)
    assert (freshness_target(rig, 5), freshness_target(rig, 6)) == (600, 30 * 86400)


def test_a_reload_keeps_the_store_and_the_source_until_a_restart(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """The store and source cannot change under a running daemon: kept, with a warning; the rest applies."""
    config = ConfigFile(rig.settings)
    daemon = rig.daemon(reload=config)
    moved = relaxed(rig.settings).model_copy(
        update={
            "store": rig.settings.store.model_copy(update={"database": "elsewhere"}),
            "source": rig.settings.source.model_copy(update={"table": "other.otel_events"}),
        }
    )
    config.now = moved
    assert daemon.reload()
    assert (
        "SIGHUP: store and source changed in the config; that takes a restart: the running"
        " store and source stay until then"
    ) in daemon_log()
    assert daemon.settings.store == rig.settings.store
    assert daemon.settings.source == rig.settings.source
    assert daemon.settings.checks == moved.checks


# ---- a tick in its own process ------------------------------------------------------------


@pytest.fixture
def stuck_settings(store: Store, store_url: str, tmp_path: Path) -> Settings:
    """Settings on the store this process holds open: a tick's process waits for its lock."""
    return settings_from_mapping(
        {
            "store": {"url": store_url, "lock_timeout": "10m"},
            "source": {"table": "stuck.otel_events"},
            "schedule": {"every": "1h", "delay": "2m"},
        },
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
    )


def test_a_tick_past_its_timeout_is_killed(stuck_settings: Settings) -> None:
    """A tick's process that does not answer in time is killed: ChildCrashed, no orphan."""
    ticks = ChildTicks(timeout=timedelta(milliseconds=500))
    request = TickRequest(
        settings=stuck_settings, now=end(5) + DELAY, last_judged=None, log_read=False
    )
    with pytest.raises(ChildCrashed, match="took longer than"):
        ticks.run(request)
    assert not ticks.running


def test_the_stop_timeout_kills_a_stuck_tick_without_a_store_alert(
    stuck_settings: Settings, daemon_log: Callable[[], list[str]]
) -> None:
    """Stopping while a tick's process hangs: killed after --stop-timeout, finish() is 1, no alert."""
    ticks = ChildTicks()
    notifier = RecordingNotifier()
    spool = Spool.for_settings(stuck_settings)
    daemon = Daemon(
        stuck_settings,
        schedule=Schedule.from_settings(stuck_settings.schedule),
        spool=spool,
        outputs=Outputs.quiet(Telemetry.from_environment({})),
        notifiers={"recording": notifier},
        running=Running(ticks=ticks, clock=MovableClock(end(5) + DELAY)),
    )
    ticking = threading.Thread(target=daemon.tick)
    ticking.start()
    wait_until(lambda: ticks.running, "the tick's process starting")
    daemon.stop()
    assert daemon.finish(timedelta(seconds=1)) == 1
    ticking.join()
    assert not ticks.running
    log = daemon_log()
    assert any("did not finish within 1s; killing it" in line for line in log), log
    assert any(line.startswith("the run was stopped unfinished") for line in log), log
    assert not notifier.attempts and not spool and daemon.last_judged is None


# ---- delivery with the store closed (issue 23, finding 4) ---------------------------------


def test_a_tick_sends_with_the_store_closed_and_the_alert_lease_claimed(rig: Rig) -> None:
    """On the embedded store a tick holds no store while a receiver answers (the receiver's
    loads and the commands use it meanwhile), and a process that opens it then stands by."""
    daemon = rig.daemon()
    received, release = hold_first_answer(rig.slack)
    rig.clock.now = end(5) + DELAY
    running = threading.Thread(target=daemon.tick)
    running.start()
    try:
        wait_until(received.is_set, "the first message")
        assert rig.opener.open == 0
        check = Lease(rig.store, rig.settings, holder_name("check")).acquire()
        assert check is not None and check.holder == daemon.holder and check.live
    finally:
        release.set()
        running.join()
    assert Lease(rig.store, rig.settings, holder_name("check")).acquire() is None
    assert len(rig.slack_texts()) == 1 and rig.opener.open == 0


def test_catching_up_each_run_says_its_messages_wait_and_the_last_says_the_delivery(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """Catching up three windows that each remind: the first two say their message waits, the
    last says what the delivery after the store was closed did (all three sent, in order)."""
    alerts = rig.settings.alerts.model_copy(update={"repeat_interval": timedelta(hours=1)})
    rig.settings = rig.settings.model_copy(update={"alerts": alerts})
    daemon = rig.daemon()
    rig.tick(daemon, end(5) + DELAY)
    rig.tick(daemon, end(8) + DELAY)
    lines = [line for line in daemon_log() if JUDGED.search(line)]
    assert [JUDGED.search(line).group(3) for line in lines] == [  # type: ignore[union-attr]
        rfc3339(end(hour)) for hour in (5, 6, 7, 8)
    ]
    assert [line.rsplit("; ", 1)[1] for line in lines[1:]] == [
        "0 message(s) delivered, 1 waiting in the outbox",
        "0 message(s) delivered, 1 waiting in the outbox",
        "3 message(s) delivered",
    ]
    texts = rig.slack_texts()
    assert len(texts) == 4
    for text, hour in zip(texts, (5, 6, 7, 8), strict=True):
        assert f"{end(hour - 1):%H:%M} – {end(hour):%H:%M} UTC" in text
