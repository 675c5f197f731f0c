"""Schema and state faults on a ClickHouse server: a missing column, a renamed table, no write grant.

The CLI runs in a subprocess against the chdb-backed HTTP server of this
process; each test has its own source table and its own watchdog database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from checks.source_ddl import create_table_sql
from tests.builder import H, settings_for
from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.conftest import PASSWORD
from watchdog.core.errors import StoreError
from watchdog.core.store import Store, open_store
from watchdog.demo.data import write_demo
from watchdog.runner.once import run_once, window_at

BIN = Path(sys.executable).parent / "memory-watchdog"
AT = datetime(2026, 11, 28, 4, tzinfo=UTC)
READER, READER_PASSWORD = "reader", "Reader-Canary-31d"


def rfc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = "/nonexistent-xdg"
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def config(tmp_path: Path, table: str, database: str, extra: str = "") -> str:
    cfg = tmp_path / f"{uuid.uuid4().hex[:6]}.toml"
    cfg.write_text(
        f'[store]\ndatabase = "{database}"\n[source]\ntable = "{table}"\n'
        f"[alerts.stdout]\nenabled = true\n{extra}"
    )
    return str(cfg)


@pytest.fixture
def demo_table(store: Store) -> str:
    table = f"ss_{uuid.uuid4().hex[:10]}.otel_events"
    write_demo(store, table, sessions=100, seed=2, at=AT)
    return table


@pytest.fixture(scope="module")
def reader_server(embedded_client: Any) -> Iterator[ClickHouseHTTPServer]:
    """A second server on the same engine where `reader` holds only SELECT grants."""
    users = {"default": PASSWORD, READER: READER_PASSWORD}
    with ClickHouseHTTPServer(embedded_client, users=users, select_only={READER}) as server:
        yield server


def test_a_missing_column_is_exit_3_naming_it(
    store: Store, ch_server: ClickHouseHTTPServer, tmp_path: Path
) -> None:
    """A source table without a column the preset reads is exit 3 naming table and column."""
    table = f"ss_{uuid.uuid4().hex[:10]}.otel_events"
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(create_table_sql("joelclaw", table, ttl=False))
    store.command(f"ALTER TABLE {table} DROP COLUMN metadata_json")
    result = cli(
        "check", "--store", ch_server.url(), "--config", config(tmp_path, table, "wd_unused")
    )
    assert result.returncode == 3
    line = result.stderr.strip()
    assert "\n" not in line
    assert f"table {table} has no column metadata_json" in line
    assert PASSWORD not in line and "default:***@" in line


def test_a_renamed_table_fires_the_store_alert_and_recovers(
    store: Store, ch_server: ClickHouseHTTPServer, demo_table: str, tmp_path: Path
) -> None:
    """Renaming the source away is exit 3 naming it and fires `store`; renaming it back resolves it."""
    database = f"wd_{uuid.uuid4().hex[:10]}"
    cfg = config(tmp_path, demo_table, database)
    url = ch_server.url()

    def check(at: datetime) -> subprocess.CompletedProcess[str]:
        return cli("check", "--store", url, "--config", cfg, "--at", rfc(at), "--notify")

    first = check(AT)
    assert first.returncode == 1, first.stderr
    store.command(f"RENAME TABLE {demo_table} TO {demo_table}_moved")
    try:
        gone = check(AT + 4 * H)
    finally:
        store.command(f"RENAME TABLE {demo_table}_moved TO {demo_table}")
    assert gone.returncode == 3
    assert f"table {demo_table} not found" in gone.stderr.splitlines()[-1]
    assert "fired store" in gone.stderr
    assert (
        "ERROR store [critical]" in gone.stderr
    )  # the stdout notifier writes to stderr under check
    back = check(AT + 8 * H)
    assert back.returncode == 1, back.stderr
    assert "resolved store" in back.stderr


def test_state_not_writable_still_reports_and_says_so(
    reader_server: ClickHouseHTTPServer, demo_table: str, tmp_path: Path
) -> None:
    """A user without write grants gets the full report and exit code, and a line each saying the
    SLO ledger and the alerts failed."""
    cfg = config(tmp_path, demo_table, f"wd_{uuid.uuid4().hex[:10]}")
    url = reader_server.url(user=READER)
    result = cli(
        "check", "--store", url, "--config", cfg, "--at", rfc(AT), "--notify", "--format", "json"
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "breached"
    # One line for the SLO ledger, judged first, and one for the alerts: each names the grant.
    ledger, alerts = result.stderr.strip().splitlines()
    assert ledger.startswith("memory-watchdog: the SLO buckets could not be judged: ")
    assert alerts.startswith("memory-watchdog: alerts: could not keep alert state")
    for line in (ledger, alerts):
        assert "access denied (the user lacks a grant" in line
        assert "CREATE DATABASE ON wd_" in line  # ClickHouse's words name the missing grant
    assert READER_PASSWORD not in result.stderr + result.stdout


def test_state_not_writable_leaves_check_without_notify_untouched(
    reader_server: ClickHouseHTTPServer, demo_table: str
) -> None:
    """`check` without --notify is read-only: a SELECT-only user evaluates exactly as the owner does."""
    settings = settings_for(demo_table)
    with open_store(reader_server.url(user=READER), query_timeout_s=30) as reader:
        as_reader = run_once(reader, settings, window_at(settings, AT)).to_json()
        with pytest.raises(StoreError, match="access denied"):
            reader.command("CREATE DATABASE IF NOT EXISTS wd_nope")
    with open_store(reader_server.url(), query_timeout_s=30) as owner:
        assert run_once(owner, settings, window_at(settings, AT)).to_json() == as_reader
