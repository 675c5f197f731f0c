"""The suite's CPU profile (tests/suite_profile): each Python process records itself at exit,
under the test it ran for, and the summary adds them up by test file and by command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.suite_profile.__main__ import main as summarize

REPO = Path(__file__).parents[1]


@pytest.mark.slow
def test_a_process_records_its_cpu_under_its_test_and_the_summary_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process started under a test with the profile on writes one line naming that test;
    the summary puts its CPU under the test's file and its command."""
    profile = tmp_path / "profile.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "tests" / "suite_profile"),
        "SUITE_PROFILE": str(profile),
        "PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)",
    }
    spin = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], env=env, check=True, timeout=60)
    (line,) = [json.loads(text) for text in profile.read_text().splitlines()]
    assert line["test"] == "tests/test_x.py::test_y (call)"
    assert line["cpu"] >= 0.2 and line["argv"] == ["-c"]
    assert summarize([str(profile)]) == 0
    printed = capsys.readouterr().out
    assert "processes the tests started: 1," in printed
    assert "tests/test_x.py" in printed and "python -c" in printed


@pytest.mark.slow
def test_without_a_profile_file_nothing_is_written(tmp_path: Path) -> None:
    """SUITE_PROFILE unset: the hook writes nothing anywhere (the suite runs without it)."""
    env = {k: v for k, v in os.environ.items() if k != "SUITE_PROFILE"}
    env["PYTHONPATH"] = str(REPO / "tests" / "suite_profile")
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, cwd=tmp_path, timeout=60)
    assert list(tmp_path.iterdir()) == []
