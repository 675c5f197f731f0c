"""The console script from outside: exit codes and one-line errors (docs/spec.md section 7)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Every test runs the CLI as a process: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"
AT = "2026-11-28T04:00:00Z"

# Written by a subprocess: the test process keeps its own embedded store open.
SETUP = """
import sys
from tests.builder import H, M, S, T0, Scenario
from watchdog.core.store import open_store
healthy = sys.argv[2] == "healthy"
sc = Scenario()
b = sc.session("s1").starts(T0 + 3 * H).recalls(T0 + 3 * H + S)
if healthy:
    b.ends(T0 + 3 * H + 10 * M).observes(T0 + 3 * H + 11 * M)
else:
    sc.session("cold").starts(T0 + 3 * H).ends(T0 + 3 * H + 10 * M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""

HOLD = """
import sys, time
from watchdog.core.store import open_store
with open_store(sys.argv[1], create=True):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    full_env.update({"XDG_DATA_HOME": "/nonexistent-xdg", **(env or {})})
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=full_env, check=False
    )


def make_store(path: Path, kind: str) -> str:
    url = f"chdb://{path}"
    subprocess.run(
        [sys.executable, "-c", SETUP, url, kind], check=True, cwd=Path(__file__).parents[1]
    )
    return url


# One store of each kind per test process (so per xdist worker), shared by this module and
# tests/test_backtest_cli.py, whose commands only read it; writing one costs a process.
_STORES: dict[str, str] = {}


def shared_store(factory: pytest.TempPathFactory, kind: str) -> str:
    """The `kind` store of this test process, written by the first test that asks for it."""
    if kind not in _STORES:
        _STORES[kind] = make_store(factory.mktemp(kind), kind)
    return _STORES[kind]


# The same read-only command on the same shared store, checked by tests of both modules.
_RUNS: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}


def run_shared(*args: str) -> subprocess.CompletedProcess[str]:
    """`run(*args)`, run once per test process: only for a command that writes nothing."""
    if args not in _RUNS:
        _RUNS[args] = run(*args)
    return _RUNS[args]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> str:
    return shared_store(tmp_path_factory, "healthy")


@pytest.fixture(scope="module")
def breached(tmp_path_factory: pytest.TempPathFactory) -> str:
    return shared_store(tmp_path_factory, "breached")


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_healthy_store_exits_0(healthy: str) -> None:
    """No breach: exit 0, text report on stdout."""
    result = run("check", "--store", healthy, "--at", AT)
    assert result.returncode == 0, result.stderr
    assert "memory-watchdog: OK" in result.stdout


def test_breach_exits_1_with_json_report(breached: str) -> None:
    """A breach exits 1; --format json follows docs/spec.md section 6."""
    result = run_shared("check", "--store", breached, "--at", AT, "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1
    assert report["evaluated_at"] == AT
    assert report["window"] == {"start": "2026-11-28T00:00:00Z", "end": AT}
    assert report["status"] == "breached"
    assert report["checks"]["recall_coverage"]["evidence"] == {"sessions": ["cold"]}
    assert len(report["checks"]) == 12  # every check id of SPEC section 5


def test_output_file_and_python_dash_m(breached: str, tmp_path: Path) -> None:
    """`python -m watchdog` works and --output writes the report to a file."""
    out = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "watchdog",
            "check",
            "--store",
            breached,
            "--at",
            AT,
            "--format",
            "json",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert json.loads(out.read_text())["status"] == "breached"


def test_window_flag_and_disabled_check(breached: str, tmp_path: Path) -> None:
    """--window sets the length; a disabled check is reported as disabled."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[checks.recall_coverage]\nenabled = false\n")
    result = run(
        "check",
        "--store",
        breached,
        "--at",
        AT,
        "--window",
        "1h",
        "--config",
        str(cfg),
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    assert report["window"]["start"] == "2026-11-28T03:00:00Z"
    assert report["checks"]["recall_coverage"]["status"] == "disabled"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("[window]\nlenght = '4h'\n", "window.lenght: unknown key (accepted: length, lookback"),
        ("[window]\nlength = 'four hours'\n", "window.length: 'four hours' is not a duration"),
        (
            "[source]\npreset = 'splunk'\n",
            "source.preset: 'splunk' is not accepted (accepted: 'joelclaw'",
        ),
        (
            "[checks.recall_coverge]\ntarget = 1\n",
            "checks.recall_coverge: unknown check id (accepted: recall_coverage",
        ),
        ("[window\nlength = 1", "invalid TOML"),
        (
            "[source]\ntable = '${NOPE_NOT_SET}'\n",
            "source.table: environment variable NOPE_NOT_SET is not set",
        ),
        (
            "[checks.observe_failure_rate]\nseverity = 'loud'\n",
            "checks.observe_failure_rate.severity: 'loud' is not accepted",
        ),
    ],
)
def test_config_errors_exit_2_with_one_line(
    healthy: str, tmp_path: Path, config: str, expected: str
) -> None:
    """Each config mistake is exit 2 with one line naming the key and what is accepted."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config)
    result = run("check", "--store", healthy, "--config", str(cfg))
    assert result.returncode == 2
    assert expected in one_line(result.stderr)


def test_missing_config_file_exits_2(healthy: str) -> None:
    """A missing config file is exit 2."""
    result = run("check", "--store", healthy, "--config", "/nope/watchdog.toml")
    assert result.returncode == 2
    assert "config file /nope/watchdog.toml does not exist" in one_line(result.stderr)


def test_config_from_environment(healthy: str, tmp_path: Path) -> None:
    """WATCHDOG_CONFIG and WATCHDOG_STORE_URL stand in for --config and --store."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[schedule]\nevery = '2h'\n")
    result = run(
        "check",
        "--at",
        AT,
        "--format",
        "json",
        env={"WATCHDOG_CONFIG": str(cfg), "WATCHDOG_STORE_URL": healthy},
    )
    assert json.loads(result.stdout)["window"]["start"] == "2026-11-28T02:00:00Z"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--at", "yesterday"], "--at: 'yesterday' is not an RFC 3339 time"),
        (["--at", "2026-11-28T04:00:00"], "has no time zone"),
        (["--window", "4 hours"], "--window:"),
        (["--format", "xml"], "--format: 'xml' is not accepted"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2(healthy: str, args: list[str], expected: str) -> None:
    """Bad flags are exit 2 with one line."""
    result = run("check", "--store", healthy, *args)
    assert result.returncode == 2
    assert expected in one_line(result.stderr)


def test_missing_table_exits_3(healthy: str, tmp_path: Path) -> None:
    """A store without the source table is exit 3 naming the table."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[source]\ntable = 'joelclaw.no_such_table'\n")
    result = run("check", "--store", healthy, "--config", str(cfg))
    assert result.returncode == 3
    assert "table joelclaw.no_such_table not found" in one_line(result.stderr)


def test_a_store_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    """A read-only command on a missing store says there is none, and leaves nothing behind."""
    missing = tmp_path / "no-store-here"
    result = run("check", "--store", f"chdb://{missing}")
    assert result.returncode == 3
    line = one_line(result.stderr)
    assert "there is no store here" in line and "memory-watchdog demo" in line
    assert not missing.exists()


@pytest.mark.slow
def test_after_the_demo_a_plain_check_names_the_demo_store_and_the_command(
    tmp_path: Path,
) -> None:
    """From a fresh data dir, `demo` then `check`: exit 3 naming the demo's store and the exact --store."""
    env = {"XDG_DATA_HOME": str(tmp_path)}
    demo = run("demo", "--sessions", "100", "--at", AT, env=env)
    assert demo.returncode == 0, demo.stderr
    data_dir = tmp_path / "memory-watchdog"
    demo_store = f"chdb://{data_dir / 'demo-store'}"
    result = run("check", "--at", AT, env=env)
    assert result.returncode == 3
    line = one_line(result.stderr)
    assert "there is no store here" in line and "table joelclaw.otel_events" not in line
    assert f"memory-watchdog demo` wrote its own: add --store {demo_store}" in line
    assert not (data_dir / "store").exists()
    suggested = run("check", "--store", demo_store, "--at", AT, env=env)
    assert suggested.returncode == 1, suggested.stderr  # the demo's injected faults breach


def test_missing_column_exits_3(healthy: str, tmp_path: Path) -> None:
    """A column the preset reads but the table lacks is exit 3 naming the column."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[source]\npreset = 'otel_logs'\ntable = 'joelclaw.otel_events'\n")
    result = run("check", "--store", healthy, "--config", str(cfg))
    assert result.returncode == 3
    assert "has no column" in one_line(result.stderr)


def test_unreachable_server_exits_3_with_password_masked() -> None:
    """An unreachable server is exit 3; the password never appears."""
    result = run("check", "--store", "http://watchdog:s3cret-pw@127.0.0.1:9/agents")
    assert result.returncode == 3
    line = one_line(result.stderr)
    assert "s3cret-pw" not in line and "http://watchdog:***@127.0.0.1:9/agents" in line


def test_locked_embedded_store_exits_3_naming_the_holder(healthy: str, tmp_path: Path) -> None:
    """Another process holding the embedded store: wait lock_timeout, then exit 3 naming it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, healthy, "20"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        cfg = tmp_path / "cfg.toml"
        cfg.write_text("[store]\nlock_timeout = '1s'\n")
        started = time.monotonic()
        result = run("check", "--store", healthy, "--config", str(cfg))
        assert result.returncode == 3
        line = one_line(result.stderr)
        assert f"held by process {holder.pid}" in line
        assert time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()


def test_notify_without_alerts_says_so(healthy: str) -> None:
    """--notify is accepted and keeps check's exit code."""
    result = run("check", "--store", healthy, "--at", AT, "--notify")
    assert result.returncode == 0


def test_version_prints_the_version() -> None:
    """--version prints the program and its version, exit 0."""
    result = run("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"memory-watchdog \d+\.\d+\.\d+\S*\n", result.stdout)


_IMPORTED = """
import sys
from watchdog.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # --help
    code = exit.code
heavy = ("apscheduler", "prometheus_client", "opentelemetry.sdk", "watchdog.daemon.service")
print(code, [m for m in heavy if m in sys.modules])
"""


@pytest.mark.parametrize(
    ("args", "loaded"),
    [
        (("check", "--help"), []),
        (("status", "--help"), []),
        (("daemon", "--help"), ["apscheduler", "prometheus_client", "watchdog.daemon.service"]),
    ],
)
def test_a_command_imports_only_what_it_runs(args: tuple[str, ...], loaded: list[str]) -> None:
    """`check` and `status` start without the daemon's modules (APScheduler, the OTLP SDK)."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], capture_output=True, text=True, check=False
    )
    assert result.stdout.splitlines()[-1] == f"0 {loaded}", result.stderr


def test_help_still_lists_every_command() -> None:
    """`--help` names every command, though a run imports only its own."""
    result = run("--help")
    assert result.returncode == 0
    for command in ("check", "demo", "test-checks", "silence", "alerts", "daemon", "status"):
        assert command in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("check", "--window", "-4h"), "--window: must be positive"),
        (("check", "--at", "-1"), "--at: '-1' is not an RFC 3339 time"),
        (("status", "--max-age", "-5m"), "--max-age: must be positive"),
    ],
)
def test_a_value_that_starts_with_a_dash_is_judged_as_a_value(
    args: tuple[str, ...], expected: str
) -> None:
    """`--window -4h` is a bad window (exit 2 saying why), not a missing argument."""
    result = run(*args)
    assert result.returncode == 2
    assert expected in one_line(result.stderr)


def test_a_malformed_store_url_is_a_usage_error(tmp_path: Path) -> None:
    """`--store postgres://x` is exit 2 (a usage error), not 3 (an unreadable store)."""
    result = run("check", "--store", "postgres://x")
    assert result.returncode == 2
    assert "--store: not a store URL (accepted: chdb:///path" in one_line(result.stderr)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--at", "0001-01-01T00:00:00Z"), "--at: '0001-01-01T00:00:00Z' is outside the times"),
        (("--at", "0001-01-01T00:00:00+14:00"), "is outside the times the store can hold"),
        (("--at", "9999-12-31T23:59:59Z"), "is outside the times the store can hold"),
        (("--window", "1000000d"), "--window: '1000000d' is longer than 3650d"),
        (("--window", "99999999999999999999h"), "is longer than 3650d"),
    ],
)
def test_extreme_times_and_durations_are_one_line_and_exit_2(
    healthy: str, args: tuple[str, ...], expected: str
) -> None:
    """Times and durations beyond what the store and the schedule can hold: exit 2, one line."""
    result = run("check", "--store", healthy, *args)
    assert result.returncode == 2
    assert expected in one_line(result.stderr)
