"""One default source: what `daemon --otlp` judges with no config, every other command judges.

The README's first step for OTLP is `memory-watchdog daemon --otlp 127.0.0.1:4318`, no config:
that daemon judges the receiver's `otel.otel_logs`. `check`, `status`, `backtest`, `explain` and
`alerts`, in the same data directory and with no config either, judge it too (the receiver's
table when the store holds it, else the joelclaw preset's: `Settings.with_default_source`).
Real processes on an embedded store of their own.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.ingest.processes import BIN, REPO, Daemon, clean_env, free_port, post_logs
from watchdog.core.settings import settings_from_mapping
from watchdog.runner.plugins import PLUGINS

pytestmark = pytest.mark.slow

SESSION = "otlp-session-1"


def session_request(start_ns: int) -> bytes:
    """One agent session as OTLP log records: it starts, recalls within a second, observes."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    name = resource.resource.attributes.add(key="service.name")
    name.value.string_value = "agent"
    scope = resource.scope_logs.add()
    second = 1_000_000_000
    events = [
        ("session.started", 0),
        ("memory.recall.started", 1),
        ("memory.recall.completed", 2),
        ("memory.observe.requested", 60),
        ("memory.observe.completed", 61),
        ("session.ended", 62),
    ]
    for event, offset in events:
        record = scope.log_records.add(time_unix_nano=start_ns + offset * second)
        record.event_name = event
        attribute = record.attributes.add(key="session.id")
        attribute.value.string_value = SESSION
    return bytes(request.SerializeToString())


def cli(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
        check=False,
    )


@pytest.fixture(scope="module")
def daemon_judged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A data directory where `daemon --otlp` (no config) received a session and judged a window."""
    home = tmp_path_factory.mktemp("default-source")
    env = clean_env(home / "xdg")
    port = free_port()
    daemon = Daemon(env, port)
    daemon.start()
    try:
        daemon.wait_receiving()
        assert post_logs(port, session_request(time.time_ns() - 3600 * 10**9)) == 200
        daemon._wait_for("judged [", 120)  # at start: the window that ended last, never judged
        assert daemon.stop() == 0, daemon.log()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
    assert "source otel.otel_logs" in daemon.log()
    return env


def test_check_judges_the_table_the_daemon_judged(daemon_judged: dict[str, str]) -> None:
    """`check` with no config reads otel.otel_logs, as the daemon did (not joelclaw, exit 3)."""
    done = cli(daemon_judged, "check", "--window", "3h")
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith("memory-watchdog: ") and "source otel.otel_logs" in done.stdout
    assert "1 of 1 sessions" in done.stdout or "0 of 1 sessions" in done.stdout


def test_status_finds_the_daemons_run(daemon_judged: dict[str, str]) -> None:
    """`status` names the daemon's completed run; `--max-age 4h30m` passes (exit 0)."""
    done = cli(daemon_judged, "status", "--max-age", "4h30m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "source otel.otel_logs" in done.stdout
    assert "Last completed run: window ending " in done.stdout


def test_backtest_and_explain_judge_it_too(daemon_judged: dict[str, str]) -> None:
    """`backtest` judges otel.otel_logs, and `explain` finds the session the daemon received."""
    backtest = cli(daemon_judged, "backtest", "--last", "1d", "--format", "json")
    assert backtest.returncode in (0, 1), backtest.stderr
    assert {w["source"] for w in json.loads(backtest.stdout)["windows"]} == {"otel.otel_logs"}
    explain = cli(daemon_judged, "explain", SESSION)
    assert explain.returncode == 0, explain.stderr
    assert SESSION in explain.stdout and "otel.otel_logs" in explain.stdout


def test_a_source_that_is_missing_names_the_table_that_holds_telemetry(
    daemon_judged: dict[str, str], tmp_path: Path
) -> None:
    """A config naming the joelclaw preset, in a store holding only OTLP logs: exit 3, and the
    error says where the telemetry is and how to read it."""
    config = tmp_path / "joelclaw.toml"
    config.write_text('[source]\npreset = "joelclaw"\n', encoding="utf-8")
    done = cli(daemon_judged, "check", "--config", str(config))
    assert done.returncode == 3
    assert (
        "table joelclaw.otel_events not found; otel.otel_logs holds OTLP logs:"
        ' --config with [source] preset = "otel_logs", or the daemon\'s config'
    ) in done.stderr


def test_status_of_another_source_names_the_runs_recorded(
    daemon_judged: dict[str, str], tmp_path: Path
) -> None:
    """`status` for a source with no run never says only "none yet" while the run log holds the
    daemon's runs: it names them, and `--max-age` says why it trips."""
    config = tmp_path / "joelclaw.toml"
    config.write_text('[source]\npreset = "joelclaw"\n', encoding="utf-8")
    done = cli(daemon_judged, "status", "--config", str(config), "--max-age", "4h30m")
    assert done.returncode == 1
    assert "Last completed run: none of this source; the run log holds completed runs of" in (
        done.stdout
    )
    assert "otel.otel_logs (window ending " in done.stdout
    assert "stale: no completed run of joelclaw.otel_events; the run log holds" in done.stderr


def test_the_default_source_is_the_receivers_table_when_the_store_holds_it() -> None:
    """With no source in the config: the receiver's logs table if the store has it, else
    joelclaw's; a source the config names is never replaced."""
    default = settings_from_mapping({}, plugins=PLUGINS, env={})
    assert default.with_default_source(lambda t: t == "otel.otel_logs").source.preset == (
        "otel_logs"
    )
    assert default.with_default_source(lambda t: False).source.table_name == (
        "joelclaw.otel_events"
    )
    named = settings_from_mapping({"source": {"preset": "joelclaw"}}, plugins=PLUGINS, env={})
    assert named.with_default_source(lambda t: True).source.preset == "joelclaw"
