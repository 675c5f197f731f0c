"""`memory-watchdog daemon` as a real process: SIGTERM mid-run, SIGHUP to its group, `--once --at`.

One test runs the daemon on a 2s schedule and stops it with SIGTERM while
Slack holds its answer; another sends SIGHUP to the whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.daemon_rig import hold_first_answer, judged_lines, wait_until
from tests.process_env import DEMO_STORE, Logged, clean_env


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


# ---- the real process ---------------------------------------------------------------------

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]


def smoke_config(tmp_path: Path, slack: SlackStandIn) -> Path:
    """Every 2s, no delay, freshness breached so the first window alerts; Slack waits long; no
    SLO."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f"""
[source]
table = "joelclaw.otel_events"

[schedule]
every = "2s"
delay = "0s"

[checks.telemetry_freshness]
target = 1

[alerts.slack]
webhook_url = "{slack.webhook_url}"
timeout = "60s"

# One message per run (the freshness alert): the SLO alerts' messages are tested apart.
[slo.observe_success]
enabled = false

[slo.recall_success]
enabled = false

[slo.recall_latency]
enabled = false
""",
        encoding="utf-8",
    )
    return config


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@pytest.mark.slow
def test_the_daemon_process_finishes_the_run_in_progress_on_sigterm_and_exits_0(
    tmp_path: Path, slack: SlackStandIn
) -> None:
    """SIGTERM while the first run waits on Slack: it completes and is recorded, none follows, exit 0."""
    # The real process on a 2s schedule and an embedded store; `status --max-age 1h` reads it back.
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    subprocess.run(
        [sys.executable, "-c", DEMO_STORE, store], check=True, timeout=300, env=env, cwd=REPO
    )
    config = smoke_config(tmp_path, slack)
    received, release = hold_first_answer(slack)
    daemon = Logged(
        subprocess.Popen(
            [str(BIN), "daemon", "--config", str(config), "--store", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
    )
    try:
        wait_until(
            lambda: received.is_set() or daemon.proc.poll() is not None, "a message", seconds=300
        )
        assert received.is_set(), daemon.log()
        daemon.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: finishing the run in progress" in daemon.log(), "SIGTERM")
        release.set()
        assert daemon.proc.wait(timeout=120) == 0, daemon.log()
    finally:
        release.set()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    log = daemon.log()
    runs = judged_lines(list(daemon.lines))
    assert len(runs) == 1, log  # the run in progress, and no new one after the signal
    _, start, finish = runs[0]
    length = datetime.fromisoformat(finish) - datetime.fromisoformat(start)
    assert length == timedelta(seconds=2) and datetime.fromisoformat(finish).second % 2 == 0
    assert "1 message(s) delivered" in log
    assert len(slack.delivered()) == 1 and "telemetry_freshness" in slack.delivered()[0].raw
    assert f"daemon started: every 2s (UTC), delay 0s; store {store}; source " in log

    status = run_cli(
        env,
        "status",
        "--config",
        str(config),
        "--store",
        store,
        "--format",
        "json",
        "--max-age",
        "1h",
    )
    assert status.returncode == 0, status.stderr
    recorded = json.loads(status.stdout)["runs"]
    assert [(r["window"]["start"], r["window"]["end"]) for r in recorded] == [(start, finish)]
    assert recorded[0]["status"] == "breached" and recorded[0]["notifications"] == 1


@pytest.mark.slow
def test_sighup_to_the_process_group_mid_run_reloads_and_the_daemon_lives_on(
    tmp_path: Path, slack: SlackStandIn
) -> None:
    """SIGHUP to every process of the daemon while a run waits on Slack: the run completes,
    the next runs take the new schedule, an invalid file is one line and changes nothing,
    and SIGTERM still ends it with 0; no traceback anywhere."""
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    subprocess.run(
        [sys.executable, "-c", DEMO_STORE, store], check=True, timeout=300, env=env, cwd=REPO
    )
    config = smoke_config(tmp_path, slack)
    received, release = hold_first_answer(slack)
    daemon = Logged(
        subprocess.Popen(
            [str(BIN), "daemon", "--config", str(config), "--store", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,  # its own process group: the hangup reaches every process
        )
    )
    group = daemon.proc.pid

    def judged_lengths() -> list[float]:
        return [
            (datetime.fromisoformat(e) - datetime.fromisoformat(s)).total_seconds()
            for _, s, e in judged_lines(list(daemon.lines))
        ]

    try:
        wait_until(
            lambda: received.is_set() or daemon.proc.poll() is not None, "a message", seconds=300
        )
        assert received.is_set(), daemon.log()
        config.write_text(config.read_text().replace('every = "2s"', 'every = "4s"'))
        os.killpg(group, signal.SIGHUP)
        wait_until(lambda: "SIGHUP: config reloaded" in daemon.log(), "the reload")
        release.set()
        wait_until(lambda: 4.0 in judged_lengths(), "a run on the new schedule", seconds=120)
        config.write_text(config.read_text().replace('every = "4s"', 'every = "four"'))
        os.killpg(group, signal.SIGHUP)
        wait_until(lambda: "SIGHUP: config not reloaded" in daemon.log(), "the refusal")
        runs = len(judged_lengths())
        wait_until(lambda: len(judged_lengths()) > runs, "a run after the refusal", seconds=120)
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=120) == 0, daemon.log()
    finally:
        release.set()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    log = daemon.log()
    lengths = judged_lengths()
    assert lengths[0] == 2.0 and lengths[-1] == 4.0 and set(lengths) == {2.0, 4.0}, log
    assert lengths.index(4.0) == 1, log  # the run in progress finished, the next one is new
    assert "1 message(s) delivered" in log
    refused = [line for line in daemon.lines if "SIGHUP: config not reloaded" in line]
    assert len(refused) == 1 and "schedule.every" in refused[0], log
    assert "Traceback" not in log and "leaked" not in log and "BrokenPipe" not in log, log


DEMO_AT = """
import sys
from datetime import datetime
from watchdog.core.store import open_store
from watchdog.demo.data import write_demo
with open_store(sys.argv[1], create=True) as store:
    write_demo(store, "joelclaw.otel_events", sessions=100, seed=3,
               at=datetime.fromisoformat(sys.argv[2]))
"""


@pytest.mark.slow
def test_daemon_once_judges_the_window_due_at_at_records_it_and_exits_with_its_verdict(
    tmp_path: Path,
) -> None:
    """`daemon --once --at T` judges the one window ending at T (run log, page) and exits 1 on a breach."""
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    at = "2026-11-28T04:00:00Z"
    subprocess.run(
        [sys.executable, "-c", DEMO_AT, store, "2026-11-28T04:00:00+00:00"],
        check=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[source]\ntable = "joelclaw.otel_events"\n\n[schedule]\ndelay = "0s"\n\n'
        f'[report]\ndir = "{tmp_path / "pages"}"\n',
        encoding="utf-8",
    )
    once = run_cli(env, "daemon", "--once", "--config", str(config), "--store", store, "--at", at)
    assert once.returncode == 1, once.stderr  # the demo's injected faults breach
    assert "judged [2026-11-28T00:00:00Z, 2026-11-28T04:00:00Z): breached" in once.stderr
    status = run_cli(env, "status", "--config", str(config), "--store", store, "--format", "json")
    recorded = json.loads(status.stdout)["runs"]
    assert [(r["window"]["start"], r["window"]["end"]) for r in recorded] == [
        ("2026-11-28T00:00:00Z", at)
    ]
    assert list((tmp_path / "pages").rglob("*.html"))


@pytest.mark.slow
def test_at_without_once_is_a_usage_error(tmp_path: Path) -> None:
    """`daemon --at` without `--once` is refused with exit 2, naming --at."""
    env = clean_env(tmp_path / "xdg")
    done = run_cli(env, "daemon", "--at", "2026-11-28T04:00:00Z")
    assert done.returncode == 2
    assert "--at: only with --once" in done.stderr
