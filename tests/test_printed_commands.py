"""The commands the program prints for the user run as printed, from anywhere.

The text report's `why one counted: memory-watchdog explain …` and the page's "How to
reproduce" name the config file the run read and its store when not the default one, quoted
for a shell: pasted into a shell in another directory, they read what the run read. Real
processes, on a store of their own, in a directory whose name needs quoting.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_env import clean_env
from watchdog.core.settings import command_flags, settings_from_mapping
from watchdog.runner.plugins import PLUGINS

# Every test runs printed commands as processes: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]
AT = "2026-11-28T04:00:00Z"

SETUP = """
import sys
from tests.builder import H, M, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("cold").starts(T0 + H).ends(T0 + H + M)  # never recalls: recall_coverage breaches
sc.session("warm").starts(T0 + H).recalls(T0 + H + M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "agents.events")
"""

CONFIG = '[source]\npreset = "joelclaw"\ntable = "agents.events"\n'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory named with a space and a quote, holding the config and the store."""
    where = tmp_path_factory.mktemp("printed") / "it's on call"
    where.mkdir()
    (where / "watchdog.toml").write_text(CONFIG, encoding="utf-8")
    url = f"chdb://{where / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=REPO, timeout=300)
    return where


def memory_watchdog(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command a user runs, from the directory of the config (a relative --config)."""
    return subprocess.run(
        [str(BIN), *args, "--config", "watchdog.toml", "--store", f"chdb://{run_dir / 'store'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(run_dir / "xdg"),
        cwd=run_dir,
        check=False,
    )


def pasted(line: str, elsewhere: Path) -> subprocess.CompletedProcess[str]:
    """`line` pasted into a shell in another directory, with memory-watchdog on PATH."""
    env = clean_env(elsewhere / "xdg")
    env["PATH"] = f"{BIN.parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", line],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=elsewhere,
        check=False,
    )


def test_the_text_reports_explain_command_runs_as_printed(run_dir: Path, tmp_path: Path) -> None:
    """`why one counted: memory-watchdog explain cold …` names the config (absolute) and the
    store; run as printed from another directory, it explains the cold session."""
    check = memory_watchdog(run_dir, "check", "--at", AT)
    assert check.returncode == 1, check.stderr
    line = next(  # recall_coverage's, the first breach listed
        line.split("why one counted: ", 1)[1]
        for line in check.stdout.splitlines()
        if "why one counted: " in line
    )
    assert f"--config {run_dir}/watchdog.toml" not in line  # quoted: the name has a quote
    assert "--config " in line and "--store " in line
    explained = pasted(line, tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "session cold" in explained.stdout and "missed" in explained.stdout
    assert "agents.events" in explained.stdout


def test_the_pages_how_to_reproduce_runs_as_printed(run_dir: Path, tmp_path: Path) -> None:
    """The page's "How to reproduce" command, pasted elsewhere, judges the same window of the
    same table: the same verdict; so does the explain command its breach lists."""
    page = tmp_path / "page.html"
    check = memory_watchdog(run_dir, "check", "--at", AT, "--format", "html", "--output", str(page))
    assert check.returncode == 1, check.stderr
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<section id="reproduce".*?<code>(.*?)</code>', text, re.S)
    assert found is not None
    again = pasted(html.unescape(found.group(1)), tmp_path)
    assert again.returncode == 1, again.stderr
    assert "source agents.events" in again.stdout
    assert re.search(r"✗ breached\s+recall_coverage\s+1 ", again.stdout), again.stdout
    explain = re.search(r"<code>(memory-watchdog explain .*?)</code>", text)
    assert explain is not None
    explained = pasted(html.unescape(explain.group(1)), tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "session cold" in explained.stdout


def test_a_default_run_prints_its_store() -> None:
    """With no config file and the default store, the printed commands still name the store:
    pasted into a shell whose WATCHDOG_STORE_URL names another (the README exports the demo
    store's), they read the store the run read."""
    settings = settings_from_mapping({}, plugins=PLUGINS, env={"XDG_DATA_HOME": "/xdg"})
    assert command_flags(settings) == "--store chdb:///xdg/memory-watchdog/store"
    elsewhere = settings_from_mapping(
        {}, plugins=PLUGINS, env={"WATCHDOG_STORE_URL": "chdb:///tmp/o th'er"}
    )
    assert command_flags(elsewhere) == "--store 'chdb:///tmp/o th'\"'\"'er'"


def _explained_by_the_check(run_dir: Path, elsewhere: Path, *check: str) -> str:
    """The explain command `check` prints for its first breach, run as printed."""
    report = memory_watchdog(run_dir, "check", *check)
    assert report.returncode == 1, report.stderr
    line = next(
        line.split("why one counted: ", 1)[1]
        for line in report.stdout.splitlines()
        if "why one counted: " in line
    )
    explained = pasted(line, elsewhere)
    assert explained.returncode == 0, explained.stderr
    return explained.stdout


def test_explain_from_a_check_at_an_unaligned_time_judges_the_checks_window(
    run_dir: Path, tmp_path: Path
) -> None:
    """A check at 02:30 judged [22:30, 02:30): the explain it prints counts the cold start in
    that window, and says so, not in the schedule's [00:00, 04:00) (issue 46, point 5)."""
    text = _explained_by_the_check(run_dir, tmp_path, "--at", "2026-11-28T02:30:00Z")
    window = "window 2026-11-27T22:30:00Z .. 2026-11-28T02:30:00Z"
    assert f"start recall: missed - recall_coverage, {window}" in text, text
    assert f"judges the {window}" in text, text


def test_explain_from_a_check_with_its_own_window_length_judges_that_window(
    run_dir: Path, tmp_path: Path
) -> None:
    """`check --window 3h30m` judged [00:30, 04:00): the explain it prints passes the length
    and counts the cold start there (issue 46, point 5)."""
    text = _explained_by_the_check(run_dir, tmp_path, "--at", AT, "--window", "3h30m")
    window = "window 2026-11-28T00:30:00Z .. 2026-11-28T04:00:00Z"
    assert f"start recall: missed - recall_coverage, {window}" in text, text


def test_the_slo_backfill_a_read_only_check_prints_runs_and_fills_the_slo_lines(
    tmp_path: Path,
) -> None:
    """A check on a store whose SLO ledger is empty says so under its SLO lines and prints the
    `slo backfill` that judges the past; pasted elsewhere, it judges the buckets, and the next
    check reads figures (coverage above 0) and prints no such line."""
    where = tmp_path / "it's new"
    where.mkdir()
    (where / "watchdog.toml").write_text(CONFIG, encoding="utf-8")
    subprocess.run(
        [sys.executable, "-c", SETUP, f"chdb://{where / 'store'}"],
        check=True,
        cwd=REPO,
        timeout=300,
    )
    first = memory_watchdog(where, "check", "--at", AT)
    assert first.returncode == 1, first.stderr
    lines = first.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if "no SLO bucket is judged yet" in line)
    command = lines[said + 1].strip()
    assert command.startswith(f"memory-watchdog slo backfill --to {AT} --config ")
    done = pasted(command, tmp_path)
    assert done.returncode == 0, done.stderr
    again = memory_watchdog(where, "check", "--at", AT)
    assert "no SLO bucket is judged yet" not in again.stdout
    slo_lines = [line for line in again.stdout.splitlines() if "observe_success" in line]
    assert slo_lines and "coverage 0%" not in slo_lines[0]
