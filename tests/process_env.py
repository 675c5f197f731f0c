"""The environment a test runs `memory-watchdog` in as a process: none of our variables, no OTLP
endpoint, no Slack, and a data directory of the test's own (docs/development.md#tests)."""

from __future__ import annotations

import os
from pathlib import Path


def clean_env(data_home: Path) -> dict[str, str]:
    """This process's environment without `WATCHDOG_*`, `OTEL_*` and `SLACK_*`, its data
    directory (`XDG_DATA_HOME`) `data_home`."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    env["XDG_DATA_HOME"] = str(data_home)
    return env
