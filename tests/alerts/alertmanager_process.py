"""A real Prometheus Alertmanager on 127.0.0.1, and `amtool` against it, for the tests.

Debian's `prometheus-alertmanager` package (the upstream binary is named
`alertmanager`; `.ci/run` installs the package). Clustering is off (it would
listen on 0.0.0.0:9094): each process is an Alertmanager of its own, as the
two of an HA pair are to their senders. Its one receiver is a webhook to a
stand-in of ours, so a test sees what Alertmanager's receivers get.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HOW_TO_GET = (
    "needs Prometheus Alertmanager and amtool: apt-get install prometheus-alertmanager"
    " (.ci/run installs it)"
)


def binaries() -> tuple[str, str] | None:
    """(alertmanager, amtool), or None when they are not installed."""
    server = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    client = shutil.which("amtool")
    return (server, client) if server and client else None


def require() -> tuple[str, str]:
    found = binaries()
    if found is None:
        pytest.skip(HOW_TO_GET)
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Wait until `condition()` holds (checked every 50 ms); fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout:g}s in vain: {what or condition}")
        threading.Event().wait(0.05)


class Alertmanager:
    """One Alertmanager process: start, stop (and start again on the same data), amtool."""

    def __init__(self, directory: Path, receiver_url: str) -> None:
        self.server, self.client = require()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config = directory / "alertmanager.yml"
        self.config.write_text(
            "route:\n"
            "  receiver: hook\n"
            "  group_by: ['alertname']\n"
            "  group_wait: 0s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: hook\n"
            "    webhook_configs:\n"
            f"      - url: {receiver_url}\n"
            "        send_resolved: true\n",
            encoding="utf-8",
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "alertmanager.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Alertmanager:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.server,
                    f"--config.file={self.config}",
                    f"--storage.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--cluster.listen-address=",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=log,
            )
        wait_until(self.ready, what=f"Alertmanager ready at {self.url} (log: {self.log})")
        return self

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"Alertmanager exited: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def amtool(self, *args: str) -> str:
        done = subprocess.run(
            [self.client, f"--alertmanager.url={self.url}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def alerts(self, *flags: str) -> list[dict[str, Any]]:
        """`amtool alert query -o json` (active, not silenced or inhibited, unless `flags`)."""
        found: list[dict[str, Any]] = json.loads(
            self.amtool("alert", "query", "-o", "json", *flags)
        )
        return found

    def names(self, *flags: str) -> list[str]:
        return sorted(a["labels"]["alertname"] for a in self.alerts(*flags))
