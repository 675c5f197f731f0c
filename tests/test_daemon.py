"""The daemon: aligned windows, catch-up, restart, a store that cannot be opened, status, http.

The daemon runs in this process, its collaborators handed in: a clock the
test moves (tests/fakes.py), a store opener yielding the shared embedded
store (or failing as a locked store), and Slack at the local stand-in. Each
test ticks it at the instants it chooses and reads back the run log, the
spool and what Slack received; each has a watchdog database and a data
directory of its own. A tick's store work in its own process (`ChildTicks`)
is tested against a store this process holds locked. One test runs
`memory-watchdog daemon` as a real process on a 2s schedule and stops it
with SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from alerts.testing import RecordingNotifier
from tests.alerts.slack_standin import Reply, SlackStandIn
from tests.builder import T0, H, M, Scenario
from tests.fakes import LOCKED, MovableClock, StoreOpener
from watchdog.core.errors import ConfigError
from watchdog.core.links import stamp
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
from watchdog.daemon.reload import Loader
from watchdog.daemon.schedule import Schedule
from watchdog.daemon.service import Daemon
from watchdog.daemon.spool import Spool
from watchdog.daemon.status import DaemonStatus, read_status, render_text
from watchdog.daemon.telemetry import Telemetry
from watchdog.daemon.tick import TickRequest
from watchdog.daemon.trigger import AlignedTrigger
from watchdog.report.files import report_dir

DELAY = 2 * M  # the schedule's delay: the window ending at h:00 is judged at h:02
STORE_DOWN = "could not read the source"  # the `store` alert's wording in Slack


def end(hour: int) -> datetime:
    """The end of the hourly window ending at `hour` o'clock on T0's day."""
    return T0 + hour * H


def window(hour: int) -> tuple[datetime, datetime]:
    """The hourly window ending at `hour` o'clock, as (start, end)."""
    return end(hour) - H, end(hour)


def wait_until(found: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """Wait until `found` holds (generously bounded), failing with `what` otherwise."""
    deadline = time.monotonic() + seconds
    while not found():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} never happened")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    """Telemetry of one session in the first hour of T0's day, none after: freshness breaches."""
    scenario = Scenario()
    scenario.session("s1").starts(T0 + 10 * M).recalls(T0 + 11 * M).ends(T0 + 40 * M)
    scenario.session("s1").observes(T0 + 41 * M)
    table = f"d_{uuid.uuid4().hex[:10]}.otel_events"
    scenario.write(store, table)
    return table


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@dataclass
class Rig:
    """One test's settings, clock, store opener and Slack; `daemon()` starts a daemon."""

    settings: Settings
    clock: MovableClock
    opener: StoreOpener
    store: Store
    slack: SlackStandIn

    def daemon(
        self, *, pages: bool = False, http: str | None = None, reload: Loader | None = None
    ) -> Daemon:
        """A daemon starting now: a new one reads the run log and the spool, as after a restart."""
        return Daemon(
            self.settings,
            schedule=Schedule.from_settings(self.settings.schedule),
            telemetry=Telemetry.from_environment({}, source=self.settings.source.display_name),
            spool=Spool.for_settings(self.settings),
            clock=self.clock,
            open_store_fn=self.opener,
            pages=pages,
            http=http,
            reload=reload,
        )

    def tick(self, daemon: Daemon, at: datetime) -> None:
        """The scheduler fires at `at`."""
        self.clock.now = at
        daemon.tick()

    def status(self) -> DaemonStatus:
        """What `memory-watchdog status` reads now."""
        return read_status(self.store, self.settings, self.clock(), 200)

    def windows(self) -> list[tuple[datetime, datetime]]:
        """Every window in the run log, oldest first."""
        return [(r.window_start, r.window_end) for r in reversed(self.status().runs)]

    def slack_texts(self) -> list[str]:
        return [r.raw for r in self.slack.delivered()]


@pytest.fixture
def make_rig(store: Store, source: str, slack: SlackStandIn, tmp_path: Path) -> Callable[..., Rig]:
    """Hourly windows judged 2m after they end; freshness target 10m; Slack at the stand-in."""

    def make(**schedule: Any) -> Rig:
        settings = settings_from_mapping(
            {
                "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
                "source": {"table": source},
                "schedule": {"every": "1h", "delay": "2m", "max_catchup": 30, **schedule},
                "checks": {"telemetry_freshness": {"target": 600}},
                "alerts": {"slack": {"webhook_url": slack.webhook_url, "timeout": "5s"}},
            },
            env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
        )
        return Rig(settings, MovableClock(end(5) + DELAY), StoreOpener(store), store, slack)

    return make


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


@pytest.fixture
def daemon_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The daemon's log lines so far."""
    caplog.set_level(logging.INFO, logger="watchdog")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]


JUDGED = re.compile(r"(judged|caught up) \[(\S+), (\S+)\)")


def judged_lines(lines: list[str]) -> list[tuple[str, str, str]]:
    """(how, start, end) of each window the log says was judged, in order."""
    return [m.groups() for line in lines if (m := JUDGED.search(line))]  # type: ignore[misc]


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
    assert skipped.startswith(
        f"catch-up: 4 missed windows ending {rfc3339(end(6))} to {rfc3339(end(9))} are not judged"
    )
    assert skipped.endswith("(schedule.max_catchup = 2); judging the newest 3")


# ---- the store cannot be opened -----------------------------------------------------------


def outage(rig: Rig) -> Daemon:
    """[4,5) judged at 5:02; then the store is locked at 6:02 and 7:02."""
    daemon = rig.daemon()
    rig.tick(daemon, end(5) + DELAY)
    rig.opener.fail_with(LOCKED)
    rig.tick(daemon, end(6) + DELAY)
    rig.tick(daemon, end(7) + DELAY)
    return daemon


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


# ---- status and its dead man's switch -----------------------------------------------------


def test_status_max_age_trips_with_no_run_passes_when_fresh_and_trips_when_old(rig: Rig) -> None:
    """--max-age: no completed run trips; the run 2m ago passes 1h; 3h later it trips 2h."""
    assert rig.status().staleness(H) == "no completed run"
    rig.tick(rig.daemon(), end(5) + DELAY)
    fresh = rig.status()
    assert fresh.staleness(H) is None
    text = render_text(fresh)
    assert f"Last completed run: window ending {rfc3339(end(5))} (2m ago)" in text
    assert "telemetry_freshness (critical)" in text  # the firing alert
    rig.clock.now = end(8)
    assert rig.status().staleness(2 * H) == "last completed 3h ago"


def test_status_in_an_outage_shows_the_spool_and_ages_the_last_good_run(rig: Rig) -> None:
    """Spooled error runs are not completed runs: the switch ages the last judged window."""
    outage(rig)
    status = rig.status()
    assert status.last_completed == end(5)
    assert status.staleness(H) == "last completed 2h2m ago"
    assert status.to_json()["spool"] == {"error_runs": 2, "since": rfc3339(end(6))}
    assert (
        f"Store outage: 2 error run(s) since {rfc3339(end(6))} wait in the local spool"
        in render_text(status)
    )


# ---- http ---------------------------------------------------------------------------------


@pytest.fixture
def http(rig: Rig) -> Iterator[tuple[Daemon, Callable[[str], tuple[int, Any]]]]:
    """A daemon serving http on a free loopback port, and a GET returning (code, body)."""
    daemon = rig.daemon(http="127.0.0.1:0", pages=True)
    server = daemon.serve_http()
    assert server is not None
    host, port = server.server_address[:2]

    def get(path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://{host!s}:{port}{path}", timeout=30) as response:
                code, body = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            code, body = exc.code, exc.read().decode()
        is_json = path in ("/healthz", "/status")
        return code, json.loads(body) if is_json else body

    yield daemon, get
    server.shutdown()
    server.server_close()


def test_healthz_ages_the_last_run_by_the_daemon_clock(
    rig: Rig, http: tuple[Daemon, Callable[[str], tuple[int, Any]]]
) -> None:
    """/healthz: 503 before any run; 200 two minutes after the window; 503 at two periods."""
    daemon, get = http
    assert get("/healthz") == (
        503,
        {
            "status": "no_run",
            "last_run_age_s": None,
            "max_age_s": 7200.0,
            "problem": "no run recorded yet",
        },
    )
    rig.tick(daemon, end(5) + DELAY)
    assert get("/healthz") == (200, {"status": "ok", "last_run_age_s": 120.0, "max_age_s": 7200.0})
    rig.clock.now = end(7)
    code, body = get("/healthz")
    assert (code, body["status"], body["last_run_age_s"]) == (503, "stale", 7200.0)


def test_http_serves_the_latest_page_and_the_status_document(
    rig: Rig, http: tuple[Daemon, Callable[[str], tuple[int, Any]]]
) -> None:
    """/ is the page of the window just judged; /status the runs, alerts and spool as of now."""
    daemon, get = http
    rig.tick(daemon, end(5) + DELAY)
    code, page = get("/")
    assert code == 200 and "<html" in page.lower() and rfc3339(end(5))[:10] in page
    code, document = get("/status")
    assert code == 200
    assert [(r["window"]["start"], r["window"]["end"]) for r in document["runs"]] == [
        (rfc3339(end(4)), rfc3339(end(5)))
    ]
    assert [a["check"] for a in document["firing_alerts"]] == ["telemetry_freshness"]
    assert document["spool"] == {"error_runs": 0, "since": None}


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
        telemetry=Telemetry.from_environment({}),
        spool=spool,
        clock=MovableClock(end(5) + DELAY),
        notifiers={"recording": notifier},
        ticks=ticks,
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


# ---- the real process ---------------------------------------------------------------------

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]
DEMO = """
import sys
from datetime import UTC, datetime
from watchdog.core.store import open_store
from watchdog.demo.data import write_demo
with open_store(sys.argv[1], create=True) as store:
    write_demo(store, "joelclaw.otel_events", sessions=100, seed=3, at=datetime.now(UTC))
"""


def clean_env(data_home: Path) -> dict[str, str]:
    """The environment without our variables or OTLP endpoints: no export, our own data dir."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    env["XDG_DATA_HOME"] = str(data_home)
    return env


@dataclass
class Process:
    """A running `memory-watchdog daemon` and the log lines it wrote so far."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def log(self) -> str:
        return "\n".join(list(self.lines))


def hold_first_answer(slack: SlackStandIn) -> tuple[threading.Event, threading.Event]:
    """Slack holds its answer to the first message until released: (received, release)."""
    received, release = threading.Event(), threading.Event()
    answer = slack.answer

    def held(handler: Any, reply: Reply) -> None:
        if not received.is_set():
            received.set()
            release.wait(timeout=120)
        answer(handler, reply)

    slack.answer = held  # type: ignore[method-assign]
    return received, release


def smoke_config(tmp_path: Path, slack: SlackStandIn) -> Path:
    """Every 2s, no delay, freshness breached so the first window alerts; Slack waits long."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f"""
[source]
table = "joelclaw.otel_events"

[schedule]
every = "2s"
delay = "0s"

[checks.telemetry_freshness]
target = 1

[alerts.slack]
webhook_url = "{slack.webhook_url}"
timeout = "60s"
""",
        encoding="utf-8",
    )
    return config


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@pytest.mark.slow
def test_the_daemon_process_finishes_the_run_in_progress_on_sigterm_and_exits_0(
    tmp_path: Path, slack: SlackStandIn
) -> None:
    """SIGTERM while the first run waits on Slack: it completes and is recorded, none follows, exit 0."""
    # The real process on a 2s schedule and an embedded store; `status --max-age 1h` reads it back.
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", DEMO, store], check=True, timeout=300, env=env, cwd=REPO)
    config = smoke_config(tmp_path, slack)
    received, release = hold_first_answer(slack)
    daemon = Process(
        subprocess.Popen(
            [str(BIN), "daemon", "--config", str(config), "--store", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
    )
    try:
        wait_until(
            lambda: received.is_set() or daemon.proc.poll() is not None, "a message", seconds=300
        )
        assert received.is_set(), daemon.log()
        daemon.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: finishing the run in progress" in daemon.log(), "SIGTERM")
        release.set()
        assert daemon.proc.wait(timeout=120) == 0, daemon.log()
    finally:
        release.set()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    log = daemon.log()
    runs = judged_lines(list(daemon.lines))
    assert len(runs) == 1, log  # the run in progress, and no new one after the signal
    _, start, finish = runs[0]
    length = datetime.fromisoformat(finish) - datetime.fromisoformat(start)
    assert length == timedelta(seconds=2) and datetime.fromisoformat(finish).second % 2 == 0
    assert "1 message(s) delivered" in log
    assert len(slack.delivered()) == 1 and "telemetry_freshness" in slack.delivered()[0].raw

    status = run_cli(
        env,
        "status",
        "--config",
        str(config),
        "--store",
        store,
        "--format",
        "json",
        "--max-age",
        "1h",
    )
    assert status.returncode == 0, status.stderr
    recorded = json.loads(status.stdout)["runs"]
    assert [(r["window"]["start"], r["window"]["end"]) for r in recorded] == [(start, finish)]
    assert recorded[0]["status"] == "breached" and recorded[0]["notifications"] == 1


@pytest.mark.slow
def test_sighup_to_the_process_group_mid_run_reloads_and_the_daemon_lives_on(
    tmp_path: Path, slack: SlackStandIn
) -> None:
    """SIGHUP to every process of the daemon while a run waits on Slack: the run completes,
    the next runs take the new schedule, an invalid file is one line and changes nothing,
    and SIGTERM still ends it with 0; no traceback anywhere."""
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", DEMO, store], check=True, timeout=300, env=env, cwd=REPO)
    config = smoke_config(tmp_path, slack)
    received, release = hold_first_answer(slack)
    daemon = Process(
        subprocess.Popen(
            [str(BIN), "daemon", "--config", str(config), "--store", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,  # its own process group: the hangup reaches every process
        )
    )
    group = daemon.proc.pid

    def judged_lengths() -> list[float]:
        return [
            (datetime.fromisoformat(e) - datetime.fromisoformat(s)).total_seconds()
            for _, s, e in judged_lines(list(daemon.lines))
        ]

    try:
        wait_until(
            lambda: received.is_set() or daemon.proc.poll() is not None, "a message", seconds=300
        )
        assert received.is_set(), daemon.log()
        config.write_text(config.read_text().replace('every = "2s"', 'every = "4s"'))
        os.killpg(group, signal.SIGHUP)
        wait_until(lambda: "SIGHUP: config reloaded" in daemon.log(), "the reload")
        release.set()
        wait_until(lambda: 4.0 in judged_lengths(), "a run on the new schedule", seconds=120)
        config.write_text(config.read_text().replace('every = "4s"', 'every = "four"'))
        os.killpg(group, signal.SIGHUP)
        wait_until(lambda: "SIGHUP: config not reloaded" in daemon.log(), "the refusal")
        runs = len(judged_lengths())
        wait_until(lambda: len(judged_lengths()) > runs, "a run after the refusal", seconds=120)
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=120) == 0, daemon.log()
    finally:
        release.set()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    log = daemon.log()
    lengths = judged_lengths()
    assert lengths[0] == 2.0 and lengths[-1] == 4.0 and set(lengths) == {2.0, 4.0}, log
    assert lengths.index(4.0) == 1, log  # the run in progress finished, the next one is new
    assert "1 message(s) delivered" in log
    refused = [line for line in daemon.lines if "SIGHUP: config not reloaded" in line]
    assert len(refused) == 1 and "schedule.every" in refused[0], log
    assert "Traceback" not in log and "leaked" not in log and "BrokenPipe" not in log, log


DEMO_AT = """
import sys
from datetime import datetime
from watchdog.core.store import open_store
from watchdog.demo.data import write_demo
with open_store(sys.argv[1], create=True) as store:
    write_demo(store, "joelclaw.otel_events", sessions=100, seed=3,
               at=datetime.fromisoformat(sys.argv[2]))
"""


@pytest.mark.slow
def test_daemon_once_judges_the_window_due_at_at_records_it_and_exits_with_its_verdict(
    tmp_path: Path,
) -> None:
    """`daemon --once --at T` judges the one window ending at T (run log, page) and exits 1 on a breach."""
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    at = "2026-11-28T04:00:00Z"
    subprocess.run(
        [sys.executable, "-c", DEMO_AT, store, "2026-11-28T04:00:00+00:00"],
        check=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[source]\ntable = "joelclaw.otel_events"\n\n[schedule]\ndelay = "0s"\n\n'
        f'[report]\ndir = "{tmp_path / "pages"}"\n',
        encoding="utf-8",
    )
    once = run_cli(env, "daemon", "--once", "--config", str(config), "--store", store, "--at", at)
    assert once.returncode == 1, once.stderr  # the demo's injected faults breach
    assert "judged [2026-11-28T00:00:00Z, 2026-11-28T04:00:00Z): breached" in once.stderr
    status = run_cli(env, "status", "--config", str(config), "--store", store, "--format", "json")
    recorded = json.loads(status.stdout)["runs"]
    assert [(r["window"]["start"], r["window"]["end"]) for r in recorded] == [
        ("2026-11-28T00:00:00Z", at)
    ]
    assert list((tmp_path / "pages").rglob("*.html"))


def test_at_without_once_is_a_usage_error(tmp_path: Path) -> None:
    """`daemon --at` without `--once` is refused with exit 2, naming --at."""
    env = clean_env(tmp_path / "xdg")
    done = run_cli(env, "daemon", "--at", "2026-11-28T04:00:00Z")
    assert done.returncode == 2
    assert "--at: only with --once" in done.stderr
