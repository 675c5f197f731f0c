"""Real watchdog processes for the process-fault tests: daemons, `check --notify`, and kills.

A `Rig` is a config (every 2s, freshness breached so an alert fires at once,
Slack at the stand-in, a short alert lease), a store URL on the HTTP
interface the test process serves from its embedded engine
(tests/faults/chserver.py), optionally behind a fault proxy, and the
processes it started, each killed with its process group at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.slack_standin import Reply, SlackStandIn
from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.proxy import FaultProxy
from tests.process_env import Logged
from tests.process_env import clean_env as clean_env  # also theirs to import
from watchdog.core.store import Store
from watchdog.demo.data import write_demo

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent / "memory-watchdog"
JUDGED = re.compile(r"(judged|caught up) \[(\S+), (\S+)\): (\w+)")
AT = datetime.fromisoformat("2026-11-28T04:00:00+00:00")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, from /proc."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def tick_processes(daemon_pid: int) -> list[int]:
    """The daemon's tick processes: the children of its forkserver (not the forkserver)."""
    parents = _parents()
    servers = [
        p for p, ppid in parents.items() if ppid == daemon_pid and "forkserver" in cmdline(p)
    ]
    return [p for p, ppid in parents.items() if ppid in servers]


class Daemon(Logged):
    """A running `memory-watchdog daemon` and its log lines so far."""

    def judged(self) -> list[tuple[str, str]]:
        return [(m.group(2), m.group(3)) for line in list(self.lines) if (m := JUDGED.search(line))]

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def wait_for(self, found: Callable[[], bool], seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            if found():
                return
            time.sleep(0.05)
        pytest.fail("the daemon never got there; log:\n" + "\n".join(self.lines))

    def ticks(self) -> list[int]:
        return tick_processes(self.proc.pid)

    def kill(self, scope: str = "group") -> None:
        """SIGKILL the daemon: its whole process group (what systemd or a container runtime
        does), only the tick process doing the store work (what the OOM killer picks), or only
        the daemon process itself."""
        if scope == "group":
            os.killpg(self.proc.pid, signal.SIGKILL)
        elif scope == "tick":
            ticks = self.ticks()
            assert ticks, "no tick process to kill"
            for pid in ticks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return
        else:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Rig:
    config: Path
    env: dict[str, str]
    store_url: str
    proxy: FaultProxy | None
    slack: SlackStandIn
    direct_url: str = ""  # the store without the proxy
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def front(self) -> FaultProxy:
        """The fault proxy in front of the store (a rig opened with one)."""
        assert self.proxy is not None, "this rig has no proxy"
        return self.proxy

    def start(self, env: dict[str, str] | None = None, *, direct: bool = False) -> Daemon:
        """A daemon (with `env`: a data directory of its own, as on another host; `direct`:
        on the store without the proxy)."""
        proc = self.popen(["daemon"], env=env, stdout=subprocess.DEVNULL, direct=direct)
        return Daemon(proc)

    def popen(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        stdout: int = subprocess.PIPE,
        direct: bool = False,
    ) -> subprocess.Popen[str]:
        """A watchdog command on this rig's config and store, in a process group of its own."""
        store = self.direct_url if direct else self.store_url
        proc = subprocess.Popen(
            [str(BIN), *command, "--config", str(self.config), "--store", store],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=env or self.env,
            cwd=REPO,
            start_new_session=True,  # its own process group, killed whole at the end
        )
        self.started.append(proc)
        return proc

    def run(self, command: list[str], *, direct: bool = False) -> subprocess.CompletedProcess[str]:
        store = self.direct_url if direct else self.store_url
        return subprocess.run(
            [str(BIN), *command, "--config", str(self.config), "--store", store],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
            check=False,
        )

    def status(self, *, direct: bool = False) -> dict[str, Any]:
        result = self.run(["status", "--format", "json", "--runs", "200"], direct=direct)
        assert result.returncode in (0, 1), result.stderr
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    def alerts(self) -> dict[str, Any]:
        result = self.run(["alerts", "--format", "json"])
        assert result.returncode == 0, result.stderr
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    def outbox(self) -> list[dict[str, Any]]:
        outbox: list[dict[str, Any]] = self.alerts()["outbox"]
        return outbox

    def texts(self) -> list[str]:
        """What Slack posted, in order (a message killed in flight counts: it was posted)."""
        return [r.text for r in self.slack.delivered()]


CONFIG = """
[store]
database = "wd_{database}"
query_timeout = "30s"

[source]
table = "{source}"

[schedule]
every = "{every}"
delay = "0s"
max_catchup = 30

[checks.telemetry_freshness]
target = 1

[alerts]
lease_ttl = "{lease_ttl}"
delivery_timeout = "2s"
{alerts}

[alerts.slack]
webhook_url = "{webhook}"
timeout = "5s"
{extra}
"""

# The built-in SLOs off: for a rig whose test counts the messages of the checks' alerts.
NO_SLOS = "".join(
    f"\n[slo.{name}]\nenabled = false\n"
    for name in ("observe_success", "recall_success", "recall_latency")
)


def demo_source(store: Store, prefix: str) -> str:
    """A demo telemetry table of its own (100 sessions ending at AT)."""
    table = f"{prefix}_{uuid.uuid4().hex[:10]}.otel_events"
    write_demo(store, table, sessions=100, seed=4, at=AT)
    return table


@contextlib.contextmanager
def open_rig(
    ch_server: ClickHouseHTTPServer,
    source: str,
    tmp_path: Path,
    *,
    proxy: bool = True,
    alerts: str = "",
    every: str = "2s",
    lease_ttl: str = "4s",
    extra: str = "",
) -> Iterator[Rig]:
    """A rig on `ch_server` (behind a fault proxy unless `proxy` is false); `alerts` adds keys
    to `[alerts]`, `every` is the schedule, `extra` more tables (`NO_SLOS`). Every process it started is killed with its group
    at the end."""
    slack = SlackStandIn()
    front = FaultProxy(ch_server.port).start() if proxy else None
    config = tmp_path / "watchdog.toml"
    config.write_text(
        CONFIG.format(
            database=uuid.uuid4().hex[:10],
            source=source,
            alerts=alerts,
            webhook=slack.webhook_url,
            every=every,
            lease_ttl=lease_ttl,
            extra=extra,
        ),
        encoding="utf-8",
    )
    direct = f"http://default:secret@127.0.0.1:{ch_server.port}/default"
    store_url = direct if front is None else direct.replace(str(ch_server.port), str(front.port))
    rig = Rig(config, clean_env(tmp_path / "xdg"), store_url, front, slack, direct)
    try:
        yield rig
    finally:
        for proc in rig.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if front is not None:
            front.close()
        slack.close()


@dataclass
class Freezer:
    """Stalls the store each time Slack receives a message, `times` times at most."""

    times: int
    frozen: int = 0

    def __call__(self) -> int:
        """How many messages have frozen the store so far."""
        return self.frozen

    def stop(self) -> None:
        """No more freezing (the test sets the proxy back to `pass` itself)."""
        self.times = self.frozen


def freeze_store_when_slack_receives(
    rig: Rig, reply: Reply | None = None, times: int = 1
) -> Freezer:
    """The first `times` messages Slack receives stall the store before Slack answers.

    The process sending then cannot mark the row delivered (its next query hangs
    for store.query_timeout); `reply` (default OK) is what Slack answers. The test
    sets the proxy back to `pass`.
    """
    proxy = rig.front
    freezer = Freezer(times)
    answer = rig.slack.answer

    def freezing(handler: Any, default_reply: Reply) -> None:
        if freezer.frozen < freezer.times:
            proxy.set_mode("stall")
            freezer.frozen += 1
        answer(handler, reply or default_reply)

    rig.slack.answer = freezing  # type: ignore[method-assign]
    return freezer
