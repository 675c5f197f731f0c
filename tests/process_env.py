"""The environment a test runs `memory-watchdog` in as a process: none of our variables, no OTLP
endpoint, no Slack, and a data directory of the test's own (docs/development.md#tests)."""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.home_fence import Home

# Run as `python -c DEMO_STORE <store URL>`: the demo's telemetry (100 sessions, now) in an
# embedded store of the test's own, for a daemon process to judge.
DEMO_STORE = """
import sys
from datetime import UTC, datetime
from watchdog.core.store import open_store
from watchdog.demo.data import write_demo
with open_store(sys.argv[1], create=True) as store:
    write_demo(store, "joelclaw.otel_events", sessions=100, seed=3, at=datetime.now(UTC))
"""


def clean_env(data_home: Path) -> dict[str, str]:
    """This process's environment without `WATCHDOG_*`, `OTEL_*` and `SLACK_*`, its data
    directory (`XDG_DATA_HOME`) `data_home`, its HOME and other XDG directories beside it
    (`<data_home>-home/`): a process started from a module-wide fixture, outside any test's
    own HOME, writes nothing of the user's either (tests/home_fence.py)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    env.update(Home.under(Path(f"{data_home}-home")).env())
    env["XDG_DATA_HOME"] = str(data_home)
    return env


@dataclass
class Logged:
    """A process started with `stderr=PIPE` (text) and the lines it wrote there so far, read as
    they come by a thread of its own."""

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
