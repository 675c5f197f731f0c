"""The crontab example's dead man's switch, run as cron would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import SETUP

ROOT = Path(__file__).parents[1]
CRONTAB = ROOT / "config" / "crontab.example"
BIN_DIR = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def cron_line(schedule: str) -> str:
    """The command of the crontab line with this schedule (the five time fields removed)."""
    for line in CRONTAB.read_text().splitlines():
        if line.startswith(schedule + " "):
            return line[len(schedule) :].strip()
    raise AssertionError(f"no line with schedule {schedule!r} in {CRONTAB}")


def run_as_cron(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a crontab command as cron does: bash -c with only the crontab's variables (and PATH)."""
    base = {"PATH": f"{BIN_DIR}:/usr/bin:/bin", "HOME": env["XDG_DATA_HOME"], "CRON_TZ": "UTC"}
    return subprocess.run(
        ["/bin/bash", "-c", command],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


@pytest.fixture
def cron_env(tmp_path: Path) -> dict[str, str]:
    """The crontab's variables: a config that references a secret, the env file that sets it."""
    store = tmp_path / "store"
    subprocess.run(
        [sys.executable, "-c", SETUP, f"chdb://{store}", "healthy"], check=True, cwd=ROOT
    )
    config = tmp_path / "watchdog.toml"
    config.write_text('[alerts.slack]\nwebhook_url = "${SLACK_WEBHOOK_URL}"\n')
    env_file = tmp_path / "env"
    env_file.write_text(
        f"SLACK_WEBHOOK_URL=http://127.0.0.1:9/never-called\nWATCHDOG_STORE_URL=chdb://{store}\n"
    )
    return {
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "WATCHDOG_CONFIG": str(config),
        "WATCHDOG_ENV_FILE": str(env_file),
    }


def test_dead_mans_switch_says_stale_when_no_window_was_judged(cron_env: dict[str, str]) -> None:
    """No run recorded: the line mails that the watchdog is stale."""
    result = run_as_cron(cron_line("*/30 * * * *"), cron_env)
    assert result.stdout.startswith("memory-watchdog is stale: "), result.stdout


def test_dead_mans_switch_is_silent_after_a_judged_window(cron_env: dict[str, str]) -> None:
    """A window judged just now: the line prints nothing (cron mails nothing)."""
    judged = run_as_cron(
        'set -a; . "$WATCHDOG_ENV_FILE"; set +a;'
        " WATCHDOG_CONFIG=/dev/null memory-watchdog check --notify --output /dev/null",
        cron_env,
    )
    assert judged.returncode in (0, 1), judged.stderr
    result = run_as_cron(cron_line("*/30 * * * *"), cron_env)
    assert (result.stdout, result.returncode) == ("", 0)


def test_dead_mans_switch_tells_a_config_error_apart_from_stale(cron_env: dict[str, str]) -> None:
    """A broken config (exit 2) is 'cannot tell', never 'stale'."""
    Path(cron_env["WATCHDOG_CONFIG"]).write_text("[window]\nlenght = '4h'\n")
    result = run_as_cron(cron_line("*/30 * * * *"), cron_env)
    assert result.stdout.startswith(
        "memory-watchdog status cannot tell whether windows are judged (exit 2):"
    ), result.stdout
    assert "window.lenght: unknown key" in result.stdout
