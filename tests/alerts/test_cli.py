"""`check --notify`, `alerts`, `silence` and `notify-test` from outside, against a webhook stand-in.

Each command is a new process on the same embedded store, so every step is
also a restart: alert state and the outbox must come from the store.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store every test starts from, written once per test process (xdist worker) and
    never opened: each test runs on a copy of its own."""
    path = tmp_path_factory.mktemp("alerts-cli") / "store"
    subprocess.run([sys.executable, "-c", SETUP, f"chdb://{path}"], check=True, cwd=ROOT)
    return path


@pytest.fixture
def setup(written: Path, tmp_path: Path, slack: SlackStandIn) -> tuple[str, str]:
    """A store holding a cold session named `<!channel>`, and a config pointing at the stand-in."""
    # A copy (its links are relative), so alert state and outbox start empty in every test.
    copy = shutil.copytree(written, tmp_path / "store", symlinks=True)
    return f"chdb://{copy}", write_config(tmp_path, slack)


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


def _config_with_unset_secret(tmp_path: Path) -> str:
    config = tmp_path / "secret.toml"
    config.write_text(
        '[alerts]\ndelivery_timeout = "1s"\n[alerts.slack]\nwebhook_url = "${MW_TEST_UNSET_WEBHOOK}"\n',
        encoding="utf-8",
    )
    return str(config)


@pytest.mark.parametrize(
    "command", [("status",), ("alerts",), ("silence", "list"), ("check", "--at", T)]
)
def test_commands_that_send_nothing_need_no_secret(
    setup: tuple[str, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    """status, alerts, silence list and check run with a notifier secret unset."""
    url, _ = setup
    result = cli(*command, "--store", url, "--config", _config_with_unset_secret(tmp_path))
    assert result.returncode in (0, 1), result.stderr  # check exits 1: the store has a breach
    assert "MW_TEST_UNSET_WEBHOOK" not in result.stderr


def test_check_notify_without_the_secret_reports_and_says_why_in_one_line(
    setup: tuple[str, str], tmp_path: Path
) -> None:
    """check --notify prints its report and exit code; one line names the unset variable."""
    url, _ = setup
    config = _config_with_unset_secret(tmp_path)
    result = cli(
        "check", "--notify", "--at", T, "--format", "json", "--store", url, "--config", config
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["status"] == "breached"
    named = [line for line in result.stderr.splitlines() if "MW_TEST_UNSET_WEBHOOK" in line]
    assert len(named) == 1
    assert (
        "alerts.slack.webhook_url: environment variable MW_TEST_UNSET_WEBHOOK is not set"
        in (named[0])
    )
    # Nothing is lost: the message waits in the outbox for the secret.
    listed = cli("alerts", "--store", url, "--config", config, "--format", "json")
    (outbox,) = json.loads(listed.stdout)["outbox"]
    assert (outbox["notifier"], outbox["pending"]) == ("slack", 1)


@pytest.mark.parametrize("command", [("daemon",), ("notify-test",)])
def test_commands_that_send_refuse_to_start_without_the_secret(
    setup: tuple[str, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The daemon and notify-test exit 2 at once, naming the key and the variable."""
    url, _ = setup
    result = cli(*command, "--store", url, "--config", _config_with_unset_secret(tmp_path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "memory-watchdog: alerts.slack.webhook_url: environment variable"
        " MW_TEST_UNSET_WEBHOOK is not set"
    ]


def test_check_notify_json_stays_clean_json_with_the_stdout_notifier(
    setup: tuple[str, str], tmp_path: Path
) -> None:
    """The report owns stdout: the stdout notifier's text goes to stderr under check."""
    url, _ = setup
    config = tmp_path / "stdout.toml"
    config.write_text("[alerts.stdout]\nenabled = true\n", encoding="utf-8")
    result = cli(
        "check", "--notify", "--at", T, "--format", "json", "--store", url, "--config", str(config)
    )
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["status"] == "breached"  # no "Extra data"
    assert "memory-watchdog: 1 firing" in result.stderr


def test_the_stdout_notifier_can_append_to_a_file(setup: tuple[str, str], tmp_path: Path) -> None:
    """`[alerts.stdout] file = ...` appends each message there instead."""
    url, _ = setup
    config, log = tmp_path / "file.toml", tmp_path / "alerts.log"
    config.write_text(f"[alerts.stdout]\nfile = '{log}'\n", encoding="utf-8")
    result = cli("check", "--notify", "--at", T, "--store", url, "--config", str(config))
    assert result.returncode == 1, result.stderr
    assert "memory-watchdog: 1 firing" in log.read_text(encoding="utf-8")
    assert "memory-watchdog: 1 firing" not in result.stdout + result.stderr
