"""Two `schema apply --materialize --yes` on one server store: one backfills, the other is refused
(issue 45 point 2: two started 0.5 s apart shared the staging table, and the narrow table held
rows twice and lacked others for good, the chunk that lost them recorded done).

Real processes against the chdb-backed HTTP server of this process (tests/faults/chserver.py),
whose requests from the two interleave as a server's would.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.builder import T0, H, M, Scenario, unique_table
from tests.faults.chserver import ClickHouseHTTPServer
from tests.process_env import clean_env
from watchdog.core.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent / "memory-watchdog"
APPLY = ("schema", "apply", "--materialize", "--yes", "--since", "1000d", "--chunk", "1h")


def twelve_hours(store: Store) -> str:
    """Twelve hours of sessions (one row written twice) in a table of the test's own."""
    sc = Scenario()
    for hour in range(12):
        for n in range(40):
            session = sc.session(f"s{hour}-{n}").starts(T0 + hour * H + n * M)
            session.recalls(T0 + hour * H + n * M + timedelta(seconds=5))
    sc.duplicate(sc.events[-1])
    table = unique_table()
    sc.write(store, table)
    return table


class Apply:
    """`schema apply --materialize --yes` by the hour against the server, in a process."""

    def __init__(self, server: ClickHouseHTTPServer, table: str, tmp_path: Path) -> None:
        self.database = f"cb_{uuid.uuid4().hex[:10]}"
        self.config = tmp_path / "watchdog.toml"
        # A short lock (10s) so that a test sees one left by a killed run expire.
        self.config.write_text(
            f'[store]\ndatabase = "{self.database}"\nquery_timeout = "5s"\n'
            f'[source]\ntable = "{table}"\n'
            '[alerts]\ndelivery_timeout = "5s"\nlease_ttl = "10s"\n',
            encoding="utf-8",
        )
        self.url = f"http://default:secret@127.0.0.1:{server.port}/default"
        self.env = clean_env(tmp_path / "xdg")

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(BIN), *APPLY, "--store", self.url, "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=REPO,
        )

    def until_backfilling(self, process: subprocess.Popen[str]) -> list[str]:
        """The lines `process` wrote up to its first backfill progress line."""
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("-- backfill ["):
                return lines
        pytest.fail(f"no backfill started: {''.join(lines)}")


def counts(store: Store, sql: str) -> Counter[str]:
    return Counter({str(k): int(n) for k, n in store.query(sql).rows})


def assert_each_row_once(store: Store, table: str, database: str) -> None:
    source = counts(store, f"SELECT id, count() FROM {table} GROUP BY id")
    narrow = counts(store, f"SELECT event_id, count() FROM {database}.memory_events GROUP BY 1")
    assert narrow == source, (
        f"{sum((narrow - source).values())} copies too many,"
        f" {sum((source - narrow).values())} missing"
    )


def test_a_second_backfill_started_meanwhile_is_refused_and_the_first_copies_each_row_once(
    store: Store, ch_server: ClickHouseHTTPServer, tmp_path: Path
) -> None:
    """The second run, started 0.5 s after the first, stops at once with one line naming the
    run that holds the backfill (exit 3); the first copies every source row exactly once."""
    table = twelve_hours(store)
    run = Apply(ch_server, table, tmp_path)
    first = run.start()
    time.sleep(0.5)
    second = run.start()
    out, err = second.communicate(timeout=300)
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    assert_each_row_once(store, table, run.database)
    assert second.returncode == 3, out + err
    (line,) = err.strip().splitlines()
    assert "another backfill of" in line and f"schema[{first.pid}]" in line, line


def test_a_backfill_killed_mid_way_holds_the_lock_until_it_expires_then_a_rerun_repairs(
    store: Store, ch_server: ClickHouseHTTPServer, tmp_path: Path
) -> None:
    """SIGKILL during the backfill: a run at once is refused naming when the dead run's lock
    expires; one after that finishes the backfill, each source row copied exactly once."""
    table = twelve_hours(store)
    run = Apply(ch_server, table, tmp_path)
    killed = run.start()
    run.until_backfilling(killed)
    killed.kill()
    killed.wait(timeout=60)
    refused = run.start()
    _, err = refused.communicate(timeout=300)
    assert refused.returncode == 3 and f"schema[{killed.pid}]" in err and "until" in err, err
    time.sleep(10)  # the lock's TTL (alerts.lease_ttl in the config)
    rerun = run.start()
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out + err
    assert_each_row_once(store, table, run.database)
