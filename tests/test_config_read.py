"""Reading the config file is bounded: a device, a FIFO or a huge file is one line and exit 2.

`--config /dev/zero` read without end into a MemoryError ("internal error",
exit 1), and a FIFO with no writer hung the command forever (issue 32,
finding 12). The commands run as processes, with a bound on their address
space, so that the unbounded read fails fast where it is not fixed.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.core.settings.load import MAX_CONFIG_BYTES

# Every test runs the CLI as a process: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"


def _bounded() -> None:
    limit = 1024**3  # a read without end meets this within seconds
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = str(tmp / "xdg")
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
        preexec_fn=_bounded,
    )


def test_a_device_without_end_as_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """`check --config /dev/zero`: exit 2, one line saying it holds more than a config does
    (before: MemoryError, "internal error", exit 1)."""
    result = run("check", "--config", "/dev/zero", tmp=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line == (
        f"memory-watchdog: config file /dev/zero is larger than {MAX_CONFIG_BYTES // 1024} KiB"
        " (a config is a few KB: is this the right file?)"
    )


def test_dev_null_as_config_is_the_defaults(tmp_path: Path) -> None:
    """`/dev/null` (a character device with nothing in it) stays what it is in a crontab: no
    config, the defaults (passes before too: the bound must not refuse it)."""
    result = run("config", "check", "--no-store", "--config", "/dev/null", tmp=tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_fifo_as_config_is_one_line_and_exit_2_at_once(tmp_path: Path) -> None:
    """A FIFO with no writer: exit 2 at once, one line (it hung forever before)."""
    fifo = tmp_path / "watchdog.toml"
    os.mkfifo(fifo)
    try:
        result = run("config", "check", "--no-store", "--config", str(fifo), tmp=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("config check still waited on the FIFO after 60s")
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line == f"memory-watchdog: config file {fifo} is not a regular file (a FIFO)"


def test_a_config_past_the_size_bound_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A regular file larger than MAX_CONFIG_BYTES (a config is a few KB): exit 2, one line."""
    config = tmp_path / "watchdog.toml"
    line = "# " + "x" * 1021 + "\n"
    config.write_text(line * (MAX_CONFIG_BYTES // len(line) + 2), encoding="utf-8")
    result = run("check", "--config", str(config), tmp=tmp_path)
    assert result.returncode == 2, result.stderr
    [said] = result.stderr.strip().splitlines()
    assert said == (
        f"memory-watchdog: config file {config} is larger than {MAX_CONFIG_BYTES // 1024} KiB"
        " (a config is a few KB: is this the right file?)"
    )
