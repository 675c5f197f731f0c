"""`--log-format json|logfmt`: every stderr line of a real command or daemon process is one record.

Each record has the time (RFC 3339 UTC, `Z`), the level, the logger, the message and the
record's structured fields; secrets are masked as in the text format (docs/operations.md#log-formats).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_rig import wait_until
from tests.process_env import DEMO_STORE, Logged, clean_env

# Every test runs the CLI as a process: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]
CANARY = "LOGCANARY7f3a"
# logfmt: key=value pairs, a value bare or double-quoted with backslash escapes.
LOGFMT_PAIR = re.compile(r'([\w.-]+)=("(?:[^"\\]|\\.)*"|[^\s"=]*)(?:\s|$)')


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_logfmt(line: str) -> dict[str, str]:
    """A logfmt line as its pairs; the whole line must be pairs."""
    pairs = LOGFMT_PAIR.findall(line)
    assert "".join(f"{k}={v} " for k, v in pairs).strip() == line.strip(), line
    return {k: json.loads(v) if v.startswith('"') else v for k, v in pairs}


def assert_record(fields: dict[str, Any], message_key: str = "message") -> None:
    """The fields every record has: a zone-aware UTC time, a level, a logger and a message."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["time"]), fields
    moment = datetime.fromisoformat(fields["time"])
    assert moment.tzinfo is not None and moment.utcoffset() == UTC.utcoffset(None)
    assert fields["level"] in {"debug", "info", "warning", "error", "critical"}, fields
    assert fields["logger"] and fields[message_key], fields


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )


def test_a_command_error_in_json_is_one_json_record_and_keeps_its_exit_code(
    tmp_path: Path,
) -> None:
    """`check --log-format json` on a missing store: exit 3, its one stderr line a JSON record."""
    done = run_cli(tmp_path, "check", "--log-format", "json", "--store", f"chdb://{tmp_path}/no")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    record = json.loads(lines[0])
    assert_record(record)
    assert record["level"] == "error" and record["logger"] == "watchdog.cli"
    assert record["message"].startswith(f"store chdb://{tmp_path}/no: there is no store here")


def test_config_problems_in_logfmt_are_one_record_each_with_exit_2(tmp_path: Path) -> None:
    """`config check --log-format logfmt`: each problem of a bad file is one logfmt record."""
    config = tmp_path / "bad.toml"
    config.write_text('[window]\nlength = "four hours"\n[nosuch]\nkey = 1\n', encoding="utf-8")
    done = run_cli(tmp_path, "config", "check", "--config", str(config), "--log-format", "logfmt")
    assert done.returncode == 2, done.stderr
    records = [parse_logfmt(line) for line in done.stderr.splitlines()]
    assert len(records) == 2, done.stderr
    for record in records:
        assert_record(record, message_key="msg")
        assert record["level"] == "error"
    assert any("window.length" in record["msg"] for record in records), records


def test_the_text_format_stays_the_default(tmp_path: Path) -> None:
    """Without --log-format a command's problem reads as it always has: `memory-watchdog: ...`."""
    done = run_cli(tmp_path, "check", "--store", f"chdb://{tmp_path}/no")
    assert done.returncode == 3
    assert done.stderr.startswith(f"memory-watchdog: store chdb://{tmp_path}/no: ")


def test_an_unknown_log_format_is_a_usage_error(tmp_path: Path) -> None:
    """`--log-format xml` is exit 2 with one line naming the accepted formats."""
    done = run_cli(tmp_path, "check", "--log-format", "xml")
    assert done.returncode == 2
    assert "--log-format: invalid choice: 'xml' (choose from 'text', 'json', 'logfmt')" in (
        done.stderr
    )


@pytest.mark.slow
def test_every_daemon_line_in_json_is_a_record_with_fields_and_masked_secrets(
    tmp_path: Path,
) -> None:
    """The daemon and its tick processes log JSON only; a judged run carries its fields; the
    webhook's secret path is masked."""
    env = clean_env(tmp_path / "xdg")
    store = f"chdb://{tmp_path / 'store'}"
    subprocess.run(
        [sys.executable, "-c", DEMO_STORE, store], check=True, timeout=300, env=env, cwd=REPO
    )
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
webhook_url = "http://127.0.0.1:{closed_port()}/services/T0/B0/{CANARY}"
timeout = "2s"
""",
        encoding="utf-8",
    )
    daemon = Logged(
        subprocess.Popen(
            [str(BIN), "daemon", "--config", str(config), "--store", store, "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
    )
    try:
        wait_until(
            lambda: '"judged [' in daemon.log() or daemon.proc.poll() is not None,
            "a judged run",
            seconds=120,
        )
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=120) == 0, daemon.log()
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    wait_until(lambda: '"SIGTERM' in daemon.log(), "the reader to finish", seconds=10)
    records = [json.loads(line) for line in list(daemon.lines)]
    for record in records:
        assert_record(record)
    assert CANARY not in daemon.log()
    assert any("/services/***" in r["message"] for r in records), daemon.log()
    judged = next(r for r in records if r["message"].startswith("judged ["))
    assert judged["source"] == "joelclaw.otel_events" and judged["status"] == "breached"
    assert judged["breached"] == ["telemetry_freshness"]
    assert judged["window_end"].endswith("Z") and judged["window_start"] < judged["window_end"]
