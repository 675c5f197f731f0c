"""Every human-facing output escapes control characters and cuts long values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.core.text import printable

# The tests run the CLI as a process: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"
ROOT = Path(__file__).parents[1]
AT = "2026-11-28T04:00:00Z"
HOSTILE = "\x1b[2J\x1b[31mowned\rrewritten\u202eevil"
HUGE = "x" * 1_000_000

SETUP = """
import sys
from tests.builder import H, M, S, T0, Scenario
from watchdog.core.store import open_store
HOSTILE = "\\x1b[2J\\x1b[31mowned\\rrewritten\\u202eevil"
sc = Scenario()
start = T0 + H
sc.session(HOSTILE).starts(start).ends(start + 10 * M).observes(start + 11 * M)
sc.session("x" * 1_000_000).starts(start + M).ends(start + 10 * M).observes(start + 11 * M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""


def test_printable_escapes_controls_and_cuts() -> None:
    """ESC, CR, NUL and bidi overrides become visible escapes; a long value is cut."""
    assert printable("a\x1b[31mb\rc\x00d\u202ee") == "a\\x1b[31mb\\rc\\x00d\\u202ee"
    assert printable(HUGE, 100) == "x" * 99 + "…"
    assert printable("plain, é, 日本") == "plain, é, 日本"


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"chdb://{tmp_path_factory.mktemp('hostile') / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT)
    return url


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = "/nonexistent-xdg"
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        cwd=ROOT,
    )


def _assert_safe(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert max(len(line) for line in text.splitlines()) < 2_000


def test_the_text_report_escapes_hostile_ids(hostile_store: str) -> None:
    """A session id with ESC sequences and CR shows escaped; a 1 MB id is cut."""
    result = _run("check", "--store", hostile_store, "--at", AT)
    assert result.returncode == 1
    _assert_safe(result.stdout)
    assert "\\x1b[2J\\x1b[31mowned\\rrewritten" in result.stdout


def test_the_stdout_notifier_escapes_hostile_ids(hostile_store: str, tmp_path: Path) -> None:
    """What cron mails (the stdout notifier's text) is escaped and cut too."""
    config = tmp_path / "w.toml"
    log = tmp_path / "alerts.log"
    config.write_text(f"[alerts.stdout]\nfile = '{log}'\n")
    result = _run(
        "check", "--notify", "--store", hostile_store, "--at", AT, "--config", str(config)
    )
    assert result.returncode == 1, result.stderr
    _assert_safe(log.read_text() + result.stderr)


def test_json_keeps_ids_exactly_as_they_are(hostile_store: str) -> None:
    """The JSON report is for scripts: ids byte for byte (JSON escapes the controls itself)."""
    result = _run("check", "--store", hostile_store, "--at", AT, "--format", "json")
    sessions = json.loads(result.stdout)["checks"]["recall_coverage"]["evidence"]["sessions"]
    assert HOSTILE in sessions and HUGE in sessions


def test_the_printed_explain_command_of_a_hostile_id_runs_as_printed(hostile_store: str) -> None:
    """The text report's `why one counted: memory-watchdog explain $'…'` of an id holding ESC,
    CR and a bidi override, pasted into bash, explains that very session (issue 45 point 7)."""
    result = _run("check", "--store", hostile_store, "--at", AT)
    line = next(
        text.split("why one counted: ", 1)[1]
        for text in result.stdout.splitlines()
        if "why one counted: " in text
    )
    assert line.startswith("memory-watchdog explain $'"), line
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["PATH"] = f"{BIN.parent}{os.pathsep}{env['PATH']}"
    env["XDG_DATA_HOME"] = "/nonexistent-xdg"
    done = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert f"session {printable(HOSTILE, 100)}" in done.stdout
