"""`memory-watchdog demo --via-otlp`: the demo's telemetry through the SDK and the receiver, same verdicts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from checks.builtin import BUILTINS
from tests.ingest.processes import BIN, REPO, clean_env

# One worker builds the two demos both tests read (under --dist loadgroup): each worker the
# module lands on would build them again.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo_otlp")]

AT = "2026-11-28T04:00:00Z"


def demo(tmp_path: Path, name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    store = f"chdb://{tmp_path / name}"
    return subprocess.run(
        [
            str(BIN),
            "demo",
            "--sessions",
            "150",
            "--seed",
            "4",
            "--at",
            AT,
            "--store",
            store,
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )


def check_lines(text: str) -> list[str]:
    """The report's check lines (status, id, value, rule, summary)."""
    return [line for line in text.splitlines() if re.match(r"^[✓✗!~?-] ", line)]


Demos = tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str], Path]


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Demos:
    """The demo written directly and sent through the receiver (same seed), and their directory."""
    tmp_path = tmp_path_factory.mktemp("demos")
    return demo(tmp_path, "direct"), demo(tmp_path, "via", "--via-otlp"), tmp_path


def injected(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("Injected: ")]
    return line


def test_demo_via_otlp_says_it_injects_what_the_demo_does(demos: Demos) -> None:
    """The "Injected:" line of `demo --via-otlp` is the direct demo's: the same faults, all named."""
    direct, via, _ = demos
    assert injected(via.stdout) == injected(direct.stdout)
    assert "questions answered without recall" in injected(via.stdout)


def test_demo_via_otlp_gives_the_demo_verdicts(demos: Demos) -> None:
    """Sent by the SDK's exporter through the receiver into otel_logs, the demo's events are judged
    exactly as the demo's own rows in joelclaw.otel_events are; its `check` line works."""
    direct, via, tmp_path = demos
    assert direct.returncode == 0, direct.stderr
    assert via.returncode == 0, via.stderr
    assert "through the SDK's OTLP/HTTP exporter" in via.stdout
    assert len(check_lines(direct.stdout)) == len(BUILTINS)
    assert check_lines(via.stdout) == check_lines(direct.stdout)
    (command,) = [
        line.strip()
        for line in via.stdout.splitlines()
        if line.startswith("  memory-watchdog check")
    ]
    assert "--config " in command
    again = subprocess.run(
        [str(BIN), *command.split()[1:]],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )
    assert again.returncode == 1, again.stderr  # breached, as the demo's faults make it
    assert check_lines(again.stdout) == check_lines(via.stdout)
