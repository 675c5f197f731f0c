"""`check --notify`, `alerts`, `silence` and `notify-test` from outside, against a webhook stand-in.

Each command is a new process on the same embedded store, so every step is
also a restart: alert state and the outbox must come from the store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.alerts.slack_standin import OK, SERVER_ERROR, SlackStandIn

BIN = Path(sys.executable).parent / "memory-watchdog"
ROOT = Path(__file__).parents[2]
T = "2026-11-28T04:00:00Z"

# Written by a subprocess: the test process keeps its own embedded store open.
SETUP = """
import sys
from tests.builder import H, M, S, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
start = T0 + H
sc.session("<!channel>").starts(start).ends(start + 10 * M).observes(start + 11 * M)
sc.session("healthy").starts(start).recalls(start + S).ends(start + 10 * M).observes(start + 11 * M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
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


def write_config(tmp_path: Path, slack: SlackStandIn) -> str:
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f"""
[alerts]
repeat_interval = "1h"
delivery_timeout = "1s"

[alerts.slack]
webhook_url = "{slack.webhook_url}"
timeout = "2s"
""",
        encoding="utf-8",
    )
    return str(config)


@pytest.fixture
def setup(tmp_path: Path, slack: SlackStandIn) -> tuple[str, str]:
    """A store holding a cold session named `<!channel>`, and a config pointing at the stand-in."""
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT)
    return url, write_config(tmp_path, slack)


def test_check_notify_from_outside(setup: tuple[str, str], slack: SlackStandIn) -> None:
    """Fire once, no re-send after a restart, nothing lost while Slack is down, escaped, exit codes kept."""
    url, config = setup
    common = ["--store", url, "--config", config]

    def check(at: str) -> tuple[subprocess.CompletedProcess[str], int]:
        """`check --notify` at `at`, and the exit code its own report calls for."""
        done = cli("check", *common, "--at", at, "--notify", "--format", "json")
        report = json.loads(done.stdout)  # the report stays clean JSON; alert lines go to stderr
        return done, 0 if report["status"] == "ok" else 1

    fired, expected = check(T)
    assert fired.returncode == expected == 1, fired.stderr
    assert "alerts: fired recall_coverage" in fired.stderr
    [first] = slack.requests
    assert "recall_coverage" in first.raw and "&lt;!channel&gt;" in first.raw
    assert "<!channel>" not in first.raw

    again, _ = check(T)
    assert again.returncode == 1 and "nothing new" in again.stderr
    assert len(slack.requests) == 1

    slack.default = SERVER_ERROR
    down, expected = check("2026-11-28T06:00:00Z")
    assert down.returncode == expected  # a chat failure never changes the exit code
    assert "will retry" in down.stderr and "waiting in the outbox" in down.stderr
    assert slack.delivered() == [first]

    slack.default = OK
    up, expected = check("2026-11-28T07:00:00Z")
    assert up.returncode == expected
    evaluated = [re.findall(r"evaluated at ([0-9T:Z-]+)", r.raw)[0] for r in slack.delivered()]
    assert evaluated == [T, "2026-11-28T06:00:00Z", "2026-11-28T07:00:00Z"]

    for result in (fired, again, down, up):
        assert "s3cr3t" not in result.stdout + result.stderr


def test_alerts_lists_states_and_outbox(setup: tuple[str, str], slack: SlackStandIn) -> None:
    """`alerts` shows the firing alert, when it was notified, and the outbox, secrets masked."""
    url, config = setup
    slack.default = SERVER_ERROR
    cli("check", "--store", url, "--config", config, "--at", T, "--notify")
    listing = cli("alerts", "--store", url, "--config", config)
    assert listing.returncode == 0, listing.stderr
    line = next(row for row in listing.stdout.splitlines() if "recall_coverage" in row)
    assert "firing" in line and T in line
    assert "outbox slack: 1 pending" in listing.stdout
    as_json = json.loads(
        cli("alerts", "--store", url, "--config", config, "--format", "json").stdout
    )
    firing = [a for a in as_json["alerts"] if a["state"] == "firing"]
    assert {a["check"] for a in firing} >= {"recall_coverage"}
    assert firing[0]["pending_outbox"] == 1
    assert "s3cr3t" not in listing.stdout + listing.stderr


def test_silence_add_list_remove(tmp_path: Path) -> None:
    """A silence is added for a duration, listed with who and why, and removed by id."""
    (tmp_path / "store").mkdir()  # an existing (empty) store: commands never create one
    common = ["--store", f"chdb://{tmp_path / 'store'}"]
    added = cli(
        "silence",
        "add",
        "recall_coverage",
        "--for",
        "2h",
        "--reason",
        "fixing the hook",
        "--by",
        "ana",
        *common,
    )
    assert added.returncode == 0, added.stderr
    silence_id = added.stdout.split()[1].rstrip(":")
    listed = cli("silence", "list", *common)
    assert (
        silence_id in listed.stdout
        and "ana" in listed.stdout
        and "fixing the hook" in listed.stdout
    )
    removed = cli("silence", "remove", silence_id, *common)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert "No silence in force." in cli("silence", "list", *common).stdout
    unknown = cli("silence", "add", "recal_coverage", "--for", "2h", "--reason", "x", *common)
    assert unknown.returncode == 2 and "accepted:" in unknown.stderr
    both = cli(
        "silence",
        "add",
        "all",
        "--for",
        "2h",
        "--until",
        "2030-01-01T00:00:00Z",
        "--reason",
        "x",
        *common,
    )
    assert both.returncode == 2 and "exactly one" in both.stderr


def test_notify_test_reports_each_notifier(tmp_path: Path, slack: SlackStandIn) -> None:
    """notify-test sends one test message per notifier and says how it went, URL masked."""
    config = write_config(tmp_path, slack)
    sent = cli("notify-test", "--config", config)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == f"slack (incoming webhook {slack.base}/services/***): sent"
    assert "test message" in slack.requests[0].raw
    slack.default = SERVER_ERROR
    failed = cli("notify-test", "--config", config)
    assert failed.returncode == 1 and "FAILED" in failed.stdout and "s3cr3t" not in failed.stdout
