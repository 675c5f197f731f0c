"""While the daemon receives, the store stays usable: the commands, the daemon's runs, a flat daemon."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.ingest.processes import BIN, REPO, Client, Daemon, clean_env, free_port, query

pytestmark = pytest.mark.slow

CONFIG = """
[schedule]
every = "5s"
delay = "0s"

[store]
lock_timeout = "60s"

[ingest]
listen = "127.0.0.1:{port}"
load_every = "250ms"
"""


COMMANDS = (
    ("check",),
    ("status",),
    ("alerts",),
    ("silence", "add", "recall_coverage", "--for", "1h", "--reason", "test"),
    ("silence", "list"),
)


def run(env: dict[str, str], config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )


def judged(daemon: Daemon) -> int:
    return sum(1 for line in list(daemon.lines) if re.search(r" (judged|caught up) \[", line))


def test_commands_and_runs_take_turns_with_sustained_ingest(tmp_path: Path) -> None:
    """Under sustained ingest (the receiver from the config's [ingest] listen), check, status,
    alerts and silence each get the store (exit 0 or 1, never 3), the daemon keeps judging its
    windows, every record is loaded, and the daemon process never loads the embedded engine."""
    env = clean_env(tmp_path / "xdg")
    config = tmp_path / "watchdog.toml"
    port = free_port()
    config.write_text(CONFIG.format(port=port), encoding="utf-8")
    daemon = Daemon(env, port, ("--config", str(config)), flag=False)
    daemon.start()
    daemon.wait_receiving()
    clients = [Client(n, daemon.port, requests=100_000, records=200) for n in range(2)]
    stop, halt = time.monotonic() + 600, threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop, halt), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    outcomes: list[tuple[str, int, str]] = []
    try:
        while judged(daemon) < 1 and daemon.proc is not None and daemon.proc.poll() is None:
            time.sleep(0.2)
        runs_before = judged(daemon)
        # Each command once: a second round took the same turns again (it doubled the wall).
        for args in COMMANDS:
            done = run(env, config, *args)
            outcomes.append((" ".join(args), done.returncode, done.stderr[-300:]))
        # Two runs judged since the commands began, the ingest going on: usually done by
        # now (the commands take longer than two periods); waited for, never timed.
        deadline = time.monotonic() + 180
        while judged(daemon) - runs_before < 2 and time.monotonic() < deadline:
            assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()
            time.sleep(0.2)
        assert daemon.proc is not None
        maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
        runs_during = judged(daemon) - runs_before
        halt.set()
        for thread in threads:
            thread.join(timeout=max(1.0, stop - time.monotonic()))
        assert daemon.stop() == 0, daemon.log()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
    assert [o for o in outcomes if o[1] not in (0, 1)] == [], outcomes
    assert runs_during >= 2, daemon.log()
    assert "_chdb" not in maps  # the engine lives in the children only: the daemon stays flat
    acknowledged = sum(len(c.acknowledged) for c in clients)
    assert acknowledged > 0
    assert [c.cuts for c in clients] == [{}, {}]  # no answer lost, nor a connection dropped
    store = f"chdb://{tmp_path / 'xdg' / 'memory-watchdog' / 'store'}"
    assert query(store, "SELECT count() FROM otel.otel_logs", env) == [[acknowledged]]
