"""The daemon as a real process: aligned windows, Slack, a locked store, SIGTERM, restart.

Each test runs `memory-watchdog daemon` on a 2s schedule against one demo
store written by a subprocess (the test process keeps its own embedded
store), with a watchdog database of its own, and reads back through
`memory-watchdog status --format json` once the daemon has stopped.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.slack_standin import SlackStandIn, timeout

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[1]
BIN = Path(sys.executable).parent / "memory-watchdog"
LINE = re.compile(r"(judged|caught up) \[(\S+), (\S+)\): (\w+)")

HOLD = """
import sys, time
from watchdog.core.store import open_store
with open_store(sys.argv[1], lock_timeout_s=30, create=True):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def clean_env(data_home: Path) -> dict[str, str]:
    """The environment without our variables or OTLP endpoints: no export, our own data dir."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    env["XDG_DATA_HOME"] = str(data_home)
    return env


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A demo store with realistic agent telemetry, written by `memory-watchdog demo`."""
    base = tmp_path_factory.mktemp("daemon-demo")
    url = f"chdb://{base / 'store'}"
    subprocess.run(
        [str(BIN), "demo", "--store", url, "--sessions", "100"],
        check=True,
        capture_output=True,
        timeout=120,
        env=clean_env(base / "xdg"),
    )
    return url


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@dataclass
class Setup:
    """One test's config file, data directory and store."""

    config: Path
    env: dict[str, str]
    store: str
    data_home: Path


@pytest.fixture
def setup(tmp_path: Path, demo_store: str, slack: SlackStandIn) -> Setup:
    """Every 2s, no delay, freshness breached (1s target) so alerts fire, Slack at the stand-in."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f"""
[store]
database = "wd_{uuid.uuid4().hex[:10]}"
lock_timeout = "1s"

[source]
table = "joelclaw.otel_events"

[schedule]
every = "2s"
delay = "0s"
max_catchup = 30

[checks.telemetry_freshness]
target = 1

[alerts.slack]
webhook_url = "{slack.webhook_url}"
timeout = "5s"
""",
        encoding="utf-8",
    )
    return Setup(config, clean_env(tmp_path / "xdg"), demo_store, tmp_path / "xdg")


@dataclass
class Daemon:
    """A running `memory-watchdog daemon` and the log lines it wrote so far."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def log(self) -> list[str]:
        with self.lock:
            return list(self.lines)

    def wait_for(self, found: Callable[[list[str]], bool], seconds: float = 30) -> None:
        """Wait until `found` holds for the log (bounded), failing with the log otherwise."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if found(self.log()):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail("daemon log never matched; log:\n" + "\n".join(self.log()))

    def runs(self) -> list[tuple[str, str, str, str]]:
        """(how, start, end, status) of every run the log reports, in order."""
        return [m.groups() for line in self.log() if (m := LINE.search(line))]  # type: ignore[misc]

    def terminate(self, seconds: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("daemon did not exit after SIGTERM; log:\n" + "\n".join(self.log()))


@pytest.fixture
def start(setup: Setup) -> Iterator[Callable[..., Daemon]]:
    """Start daemons for the test; any still running at the end are killed."""
    started: list[Daemon] = []

    def launch(*args: str) -> Daemon:
        proc = subprocess.Popen(
            [str(BIN), "daemon", "--config", str(setup.config), "--store", setup.store, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=setup.env,
            cwd=REPO,
        )
        daemon = Daemon(proc)
        started.append(daemon)
        return daemon

    yield launch
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def status(setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "status", "--config", str(setup.config), "--store", setup.store, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=setup.env,
        check=False,
    )


def status_json(setup: Setup) -> dict[str, Any]:
    result = status(setup, "--format", "json", "--runs", "200")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


def assert_tiled(windows: list[tuple[str, str]]) -> None:
    """Consecutive 2s windows on even seconds, each start the previous end."""
    for start, end in windows:
        assert (parse(end) - parse(start)).total_seconds() == 2
        assert int(parse(end).timestamp()) % 2 == 0
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start == end, windows


def poll(found: Callable[[], dict[str, Any] | None], seconds: float = 15) -> dict[str, Any]:
    """Call `found` until it returns something (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value is not None:
            return value
        time.sleep(0.05)
    pytest.fail("condition never held")


def told_slack(spool: Path) -> dict[str, Any] | None:
    """The spool document once it says Slack was told that the store is down."""
    try:
        document: dict[str, Any] = json.loads(spool.read_text())
    except (OSError, ValueError):
        return None
    return document if document.get("told") == ["slack"] else None


def runs_in_log(daemon: Daemon, n: int) -> Callable[[list[str]], bool]:
    return lambda lines: sum(1 for line in lines if LINE.search(line)) >= n


def test_daemon_judges_consecutive_aligned_windows_and_alerts_in_slack(
    setup: Setup, start: Callable[..., Daemon], slack: SlackStandIn
) -> None:
    """Every 2s window is judged once, in order; the breach reaches Slack once."""
    daemon = start()
    daemon.wait_for(runs_in_log(daemon, 4))
    assert daemon.terminate() == 0
    logged = [(s, e) for _, s, e, _ in daemon.runs()]
    assert_tiled(logged)
    runs = status_json(setup)["runs"]
    recorded = [(r["window"]["start"], r["window"]["end"]) for r in reversed(runs)]
    assert recorded == logged
    assert all(r["status"] == "breached" and r["problem"] == "" for r in runs)
    assert all("telemetry_freshness" in r["breached"] for r in runs)
    delivered = slack.delivered()
    assert len(delivered) == 1, [r.text for r in slack.requests]
    assert "telemetry_freshness" in delivered[0].raw


def test_daemon_survives_a_locked_store_and_recovers(
    setup: Setup, start: Callable[..., Daemon], slack: SlackStandIn
) -> None:
    """Store held by another process for a tick: error run spooled, store alert sent, then caught up."""
    daemon = start()
    daemon.wait_for(runs_in_log(daemon, 1))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, setup.store, "3"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=setup.env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        daemon.wait_for(lambda lines: any("the store cannot be used" in x for x in lines))
        spool = list((setup.data_home / "memory-watchdog" / "spool").glob("*.json"))
        assert len(spool) == 1
        spooled = poll(lambda: told_slack(spool[0]))
        assert spooled["runs"] and "held by process" in spooled["runs"][0]["problem"]
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    daemon.wait_for(lambda lines: any("written to the run log" in x for x in lines))
    daemon.wait_for(lambda lines: any("resolved store" in x for x in lines))
    assert daemon.terminate() == 0

    assert_tiled([(s, e) for _, s, e, _ in daemon.runs()])  # the failed window was judged later
    texts = [r.raw for r in slack.delivered()]
    store_alerts = [t for t in texts if "could not read the source" in t]
    assert len(store_alerts) == 1, texts  # told once, directly, while the store was down
    assert any("held by process" in t for t in store_alerts)
    assert any("resolved" in t.lower() and "store" in t for t in texts), texts
    document = status_json(setup)
    assert document["spool"]["error_runs"] == 0
    assert not [a for a in document["firing_alerts"] if a["check"] == "store"]
    assert not spool[0].exists()


def test_sigterm_mid_run_finishes_the_run_and_exits_0(
    setup: Setup, start: Callable[..., Daemon], slack: SlackStandIn
) -> None:
    """SIGTERM while a run waits on Slack: the run completes, is recorded, exit 0."""
    slack.reply(timeout(1.5))  # the first delivery takes 1.5s to answer
    daemon = start()
    deadline = time.monotonic() + 30
    while not slack.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert slack.requests, "the daemon never posted to Slack"
    assert daemon.terminate() == 0
    log = "\n".join(daemon.log())
    assert "SIGTERM: finishing the run in progress" in log
    runs = daemon.runs()
    assert len(runs) == 1, log  # the run in progress, and no new one after the signal
    recorded = status_json(setup)["runs"]
    assert [(r["window"]["start"], r["window"]["end"]) for r in recorded] == [runs[0][1:3]]
    assert recorded[0]["notifications"] == 1
    assert len(slack.requests) == 1 and "1 message(s) delivered" in log  # answered after 1.5s


def test_stop_timeout_kills_a_stuck_run_and_exits_1(
    setup: Setup, start: Callable[..., Daemon], slack: SlackStandIn
) -> None:
    """A run still going after --stop-timeout is killed: exit 1 at once, no store alert."""
    slack.reply(timeout(4.0))
    daemon = start("--stop-timeout", "1s")
    deadline = time.monotonic() + 30
    while not slack.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert slack.requests, "the daemon never posted to Slack"
    stopped = time.monotonic()
    assert daemon.terminate() == 1
    assert time.monotonic() - stopped < 3.5
    log = "\n".join(daemon.log())
    assert "did not finish within 1s; killing it" in log
    assert "the store cannot be used" not in log and not daemon.runs()


def test_a_tick_past_its_timeout_is_killed(setup: Setup) -> None:
    """A tick's process that does not answer in time is killed: ChildCrashed, no orphan."""
    from datetime import UTC, timedelta

    from watchdog.core.settings import load_settings
    from watchdog.daemon.child import ChildCrashed, ChildTicks
    from watchdog.daemon.tick import TickRequest

    settings = load_settings(str(setup.config), env={"XDG_DATA_HOME": str(setup.data_home)})
    ticks = ChildTicks(timeout=timedelta(milliseconds=50))
    request = TickRequest(
        settings=settings, now=datetime.now(UTC), last_judged=None, log_read=False
    )
    with pytest.raises(ChildCrashed, match="took longer than"):
        ticks.run(request)
    assert ticks._child is None


def test_restart_judges_each_missed_window_once_in_order(
    setup: Setup, start: Callable[..., Daemon]
) -> None:
    """Stop, let windows pass, start: the missed ones are caught up oldest first, none twice."""
    first = start()
    first.wait_for(runs_in_log(first, 2))
    assert first.terminate() == 0
    time.sleep(5)  # two or three 2s windows pass unjudged
    second = start()
    second.wait_for(lambda lines: any(" judged [" in x for x in lines))
    assert second.terminate() == 0

    before, after = first.runs(), second.runs()
    caught = [r for r in after if r[0] == "caught up"]
    assert len(caught) >= 2, after
    assert after[: len(caught)] == caught  # the catch-up comes first
    assert caught[0][1] == before[-1][2]  # resuming where the first daemon stopped
    windows = [(s, e) for _, s, e, _ in before + after]
    assert_tiled(windows)
    assert len(set(windows)) == len(windows)
    recorded = [(r["window"]["start"], r["window"]["end"]) for r in status_json(setup)["runs"]]
    assert list(reversed(recorded)) == windows


def test_status_max_age_is_a_dead_mans_switch(setup: Setup, start: Callable[..., Daemon]) -> None:
    """No completed run: exit 1; fresh run: exit 0; older than --max-age: exit 1."""
    assert status(setup, "--max-age", "1h").returncode == 1
    daemon = start()
    daemon.wait_for(runs_in_log(daemon, 1))
    assert daemon.terminate() == 0
    fresh = status(setup, "--max-age", "1h")
    assert fresh.returncode == 0, fresh.stderr
    assert "Last completed run: window ending" in fresh.stdout
    assert "telemetry_freshness" in fresh.stdout  # the firing alert
    time.sleep(3)
    stale = status(setup, "--max-age", "2s")
    assert stale.returncode == 1
    assert "stale: last completed" in stale.stderr


def test_http_serves_the_page_health_and_status(setup: Setup, start: Callable[..., Daemon]) -> None:
    """`--http 127.0.0.1:0`: the latest window's page, /healthz 200, /status with the runs."""
    daemon = start("--http", "127.0.0.1:0")
    daemon.wait_for(runs_in_log(daemon, 2))
    (line,) = [x for x in daemon.log() if "serving pages" in x]
    base = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    assert base is not None

    def get(path: str) -> tuple[int, str]:
        with urllib.request.urlopen(base.group(1) + path, timeout=10) as response:
            return response.status, response.read().decode()

    try:
        assert get("/healthz")[0] == 200
        code, page = get("/")
        assert code == 200 and "<html" in page.lower()
        code, text = get("/status")
        document = json.loads(text)
        assert code == 200 and document["runs"] and document["spool"]["error_runs"] == 0
    finally:
        assert daemon.terminate() == 0
