"""systemd's notify protocol against a socket stand-in: READY, WATCHDOG while healthy, STOPPING.

The stand-in is a datagram socket bound where systemd would put one (a path
in a short temporary directory, or an abstract name), read as systemd reads
it: one datagram per notification, `KEY=value` lines. The last test runs
`memory-watchdog daemon` as a real process under such a socket, as the unit
in config/memory-watchdog.service does (`Type=notify`, `WatchdogSec=`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.builder import T0, H, M
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.spool import Spool
from watchdog.daemon.systemd import Keepalive, Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.runner.plugins import PLUGINS

BIN = Path(sys.executable).parent / "memory-watchdog"


class NotifySocket:
    """What systemd listens on: a datagram socket, each datagram one notification."""

    def __init__(self, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._dir = ""
        if abstract:
            name = f"memory-watchdog-test-{uuid.uuid4().hex}"
            self.sock.bind("\0" + name)
            self.env_value = "@" + name
        else:
            # Short on purpose: a socket path may not exceed 107 bytes.
            self._dir = tempfile.mkdtemp(prefix="sd-", dir="/tmp")
            path = os.path.join(self._dir, "notify")
            self.sock.bind(path)
            self.env_value = path

    def receive(self, timeout: float = 30.0) -> dict[str, str]:
        """The next notification as {KEY: value} (generously bounded wait)."""
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n") if line)

    def receive_until(self, key: str, timeout: float = 60.0) -> list[dict[str, str]]:
        """Every notification up to and including the first carrying `key`."""
        seen = []
        while True:
            message = self.receive(timeout)
            seen.append(message)
            if key in message:
                return seen

    def close(self) -> None:
        self.sock.close()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture
def listener() -> Iterator[NotifySocket]:
    standin = NotifySocket()
    yield standin
    standin.close()


def test_ready_status_and_stopping_arrive_as_datagrams_of_key_value_lines(
    listener: NotifySocket,
) -> None:
    """Each notification is one datagram; READY and STOPPING carry a one-line STATUS."""
    notify = Notify.from_environment({"NOTIFY_SOCKET": listener.env_value})
    assert notify.ready("next run\n2026-11-28T04:02:00Z")
    assert listener.receive() == {"READY": "1", "STATUS": "next run 2026-11-28T04:02:00Z"}
    assert notify.stopping("finishing the run in progress")
    assert listener.receive() == {"STOPPING": "1", "STATUS": "finishing the run in progress"}


def test_reloading_carries_the_monotonic_time_systemd_asks_for(listener: NotifySocket) -> None:
    """RELOADING=1 comes with MONOTONIC_USEC (systemd refuses a reload notification without it)."""
    notify = Notify.from_environment({"NOTIFY_SOCKET": listener.env_value})
    notify.reloading()
    message = listener.receive()
    assert message["RELOADING"] == "1" and int(message["MONOTONIC_USEC"]) > 0


def test_an_abstract_socket_is_named_with_a_leading_at() -> None:
    """NOTIFY_SOCKET=@name is the abstract name `\\0name`."""
    standin = NotifySocket(abstract=True)
    try:
        Notify.from_environment({"NOTIFY_SOCKET": standin.env_value}).watchdog()
        assert standin.receive() == {"WATCHDOG": "1"}
    finally:
        standin.close()


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    """Not under systemd (or Type=simple): every notification is a no-op."""
    notify = Notify.from_environment({})
    assert not notify.enabled
    assert notify.ready("x") is False and notify.ping_interval is None


def test_a_socket_that_went_away_is_never_an_error(listener: NotifySocket) -> None:
    """A failed send is logged at debug level and answered False, never raised."""
    notify = Notify.from_environment({"NOTIFY_SOCKET": listener.env_value})
    listener.close()
    assert notify.watchdog() is False


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({"WATCHDOG_USEC": "120000000"}, 60.0),
        ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": str(os.getpid())}, 60.0),
        ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({}, None),
    ],
    ids=["usec", "our-pid", "other-pid", "zero", "none"],
)
def test_the_watchdog_pings_at_half_of_watchdog_usec_and_only_for_its_pid(
    listener: NotifySocket, env: dict[str, str], interval: float | None
) -> None:
    """sd_watchdog_enabled's rules: half of WATCHDOG_USEC; WATCHDOG_PID, when set, must be us."""
    notify = Notify.from_environment({"NOTIFY_SOCKET": listener.env_value, **env})
    assert notify.ping_interval == interval


def test_keepalive_pings_only_while_healthy(listener: NotifySocket) -> None:
    """A beat sends WATCHDOG=1 when healthy; unhealthy (or a failing check) sends nothing."""
    state = {"healthy": True}

    def healthy() -> bool:
        if state["healthy"] is None:
            raise RuntimeError("broken")
        return bool(state["healthy"])

    keepalive = Keepalive(Notify.from_environment({"NOTIFY_SOCKET": listener.env_value}), healthy)
    assert keepalive.beat() is True
    assert listener.receive() == {"WATCHDOG": "1"}
    state["healthy"] = False
    assert keepalive.beat() is False
    state["healthy"] = None  # type: ignore[assignment]
    assert keepalive.beat() is False
    state["healthy"] = True
    keepalive.beat()
    assert listener.receive() == {"WATCHDOG": "1"}  # nothing was sent in between


class BlockingOpener:
    """A store opener that holds the tick until released (a tick in progress)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.entered = threading.Event()
        self.release = threading.Event()

    @contextlib.contextmanager
    def __call__(self, settings: Settings) -> Iterator[Store]:
        self.entered.set()
        self.release.wait(60)
        yield self.store


def test_a_tick_going_longer_than_its_timeout_is_not_healthy(store: Store, tmp_path: Path) -> None:
    """Stopping, the run in progress may finish: healthy until it outlasts its timeout."""
    settings = settings_from_mapping(
        {
            "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
            "source": {"table": f"nowhere_{uuid.uuid4().hex[:8]}.t"},
            "schedule": {"every": "1h"},
        },
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path)},
    )
    opener = BlockingOpener(store)
    daemon = Daemon(
        settings,
        schedule=Schedule.from_settings(settings.schedule),
        spool=Spool.for_settings(settings),
        outputs=Outputs.quiet(Telemetry()),
        notifiers={},
        running=Running(clock=lambda: T0 + H + 2 * M, open_store_fn=opener, pages=False),
    )
    assert daemon.healthy() is False  # no scheduler running yet
    worker = threading.Thread(target=daemon.tick)
    worker.start()
    assert opener.entered.wait(30)
    started = daemon.tick_started
    assert started is not None
    daemon.stop()
    try:
        assert daemon.healthy(now=started + 1.0) is True
        limit = daemon.stuck_after.total_seconds()
        assert daemon.healthy(now=started + limit + 1.0) is False
    finally:
        opener.release.set()
        worker.join(60)
    assert daemon.tick_started is None and daemon.healthy() is True


@pytest.mark.slow
def test_the_daemon_under_systemd_says_ready_pings_the_watchdog_and_says_stopping(
    listener: NotifySocket, tmp_path: Path
) -> None:
    """`memory-watchdog daemon` as systemd runs it: READY, WATCHDOG pings, STOPPING, exit 0."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[store]\ndatabase = "wd_{uuid.uuid4().hex[:10]}"\n'
        '[source]\ntable = "nowhere.otel_events"\n[schedule]\nevery = "1h"\n',
        encoding="utf-8",
    )
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    env |= {
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "NOTIFY_SOCKET": listener.env_value,
        "WATCHDOG_USEC": str(int(timedelta(seconds=0.4).total_seconds() * 1e6)),
    }
    proc = subprocess.Popen(
        [str(BIN), "daemon", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        before_ready = listener.receive_until("READY")
        assert before_ready[-1]["READY"] == "1" and "next run" in before_ready[-1]["STATUS"]
        pings = [listener.receive_until("WATCHDOG") for _ in range(3)]
        assert all(p[-1] == {"WATCHDOG": "1"} for p in pings)
        proc.send_signal(signal.SIGTERM)
        stopping = listener.receive_until("STOPPING")
        assert stopping[-1]["STOPPING"] == "1"
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr


# ---- the unit file ------------------------------------------------------------------------

UNIT = Path(__file__).parents[1] / "config" / "memory-watchdog.service"


def unit_service() -> dict[str, list[str]]:
    """The [Service] section's settings (a key may repeat, as Environment= does)."""
    section, found = "", {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def install_lines() -> list[str]:
    """The install commands in the unit's header comment, without their own comments."""
    return [
        line.lstrip("# ").split("  #")[0].strip()
        for line in UNIT.read_text(encoding="utf-8").splitlines()
        if line.startswith("#   sudo ")
    ]


def test_the_unit_is_type_notify_with_a_watchdog_and_reloads_with_sighup() -> None:
    """Type=notify, only the main process may notify, a watchdog, and ExecReload sends SIGHUP."""
    service = unit_service()
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["WatchdogSec"] == ["2min"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert service["Restart"] == ["on-failure"]  # a watchdog timeout is a failure


def test_the_units_paths_are_the_ones_its_install_lines_create() -> None:
    """ExecStart is in the venv installed; the env file, config and data directory are where install puts them."""
    service, lines = unit_service(), install_lines()
    venv = next(line.split()[4] for line in lines if "-m venv" in line)
    assert service["ExecStart"][0].split()[0] == f"{venv}/bin/memory-watchdog"
    installed = [line.split()[-1] for line in lines if line.startswith("sudo install -m")]
    environment = dict(v.split("=", 1) for v in service["Environment"])
    assert service["EnvironmentFile"][0] in installed
    assert environment["WATCHDOG_CONFIG"] in installed
    home = next(line.split("--home-dir ")[1].split()[0] for line in lines if "useradd" in line)
    assert f"{environment['XDG_DATA_HOME']}/{service['StateDirectory'][0]}" == home
