"""`schema apply --materialize` while the source is written: every row in the narrow table and the state, once.

The command fixed `until` before it created the views, and the backfill
copied `ts < until`: a row inserted between the two, or already in the
source but stamped after `until` (an agent clock running ahead), reached
neither table, for good (issue 32, finding 4). Now the views come first and
the backfill copies, chunk by chunk, what the source holds and the narrow
table lacks (the state is fed by what reaches the narrow table), resumable:
a chunk done is recorded and not redone, a chunk cut short is finished
without doubling a row.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checks.builtin import configured_checks
from checks.materialize import materialize_statements, plan_for
from tests.builder import JOELCLAW_COLUMNS, T0, H, M, S, Scenario, settings_for, unique_table
from tests.process_env import clean_env
from tests.test_schema import _scenario as every_check
from watchdog.cli.main import main
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at

REPO = Path(__file__).parents[1]
BIN = Path(sys.executable).parent / "memory-watchdog"
APPLY = ("schema", "apply", "--materialize", "--yes")


def write_config(path: Path, table: str, database: str, **source: str) -> Path:
    lines = ["[store]", f'database = "{database}"', "[source]", f'table = "{table}"']
    lines += [f'{key} = "{value}"' for key, value in source.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Ingest:
    """A thread inserting one event of a live session every 50 ms into the raw table, one in
    three stamped 90 s ahead (an agent clock running ahead)."""

    def __init__(self, store: Store, table: str) -> None:
        self.store, self.table = store, table
        self.stop = threading.Event()
        self.inserted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        scenario = Scenario()
        scenario._ids = itertools.count(500_000)  # ids apart from the scenario's
        while not self.stop.is_set():
            now = datetime.now(UTC)
            ahead = self.inserted % 3 == 2
            at = now + timedelta(seconds=90) if ahead else now
            session = scenario.session(f"live-{self.inserted // 6}")
            if self.inserted % 6 == 0:
                session.starts(at)
            else:
                session.recalls(at)
            event = scenario.events[-1]
            self.store.insert(self.table, [event.row(now)], JOELCLAW_COLUMNS)
            self.inserted += 1
            self.stop.wait(0.05)

    def __enter__(self) -> Ingest:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def id_counts(store: Store, sql: str) -> Counter[str]:
    return Counter({str(k): int(n) for k, n in store.query(sql).rows})


def test_rows_written_during_the_apply_reach_the_narrow_table_and_the_state_once(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """Events inserted every 50 ms during `schema apply --materialize --yes`, a third of them
    stamped 90 s ahead, and two sessions stamped ahead before it: afterwards each source row
    is in the narrow table exactly once (duplicates in the source as many times), and the
    state's report equals the raw one (before: rows missing from both, for good)."""
    table = unique_table()
    sc = every_check()
    ahead = datetime.now(UTC) + timedelta(seconds=90)
    sc.session("ahead1").starts(ahead).recalls(ahead + S, result_count=2)
    sc.session("ahead2").starts(ahead + S)  # a cold start, judged once its grace is due
    sc.write(store, table)
    database = f"bf_{uuid.uuid4().hex[:10]}"
    config = write_config(tmp_path / "watchdog.toml", table, database)
    with Ingest(store, table) as ingest:
        time.sleep(0.3)
        out = io.StringIO()
        with redirect_stdout(out):
            code = main([*APPLY, "--since", "1000d", "--store", store_url, "--config", str(config)])
        assert code == 0, out.getvalue()
        time.sleep(0.3)  # and after: the views alone
    assert ingest.inserted > 10
    source = id_counts(store, f"SELECT id, count() FROM {table} GROUP BY id")
    narrow = id_counts(
        store, f"SELECT event_id, count() FROM {database}.memory_events GROUP BY event_id"
    )
    assert narrow == source
    raw = settings_for(table)
    state = settings_for(table, {"source": {"state": f"{database}.session_state"}})
    for at in (T0 + 4 * H, ahead + 10 * M):
        reports = [run_once(store, s, window_at(s, at)).to_json() for s in (raw, state)]
        assert reports[1] == reports[0], at


SETUP = """
import sys
from datetime import timedelta
from tests.builder import T0, H, M, Scenario
from watchdog.core.store import open_store
sc = Scenario()
for hour in range(12):
    for n in range(40):
        s = sc.session(f"s{hour}-{n}").starts(T0 + hour * H + n * M)
        s.recalls(T0 + hour * H + n * M + timedelta(seconds=5))
    sc.duplicate(sc.events[-1])
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""
QUERY = """
import json, sys
from watchdog.core.store import open_store
with open_store(sys.argv[1]) as store:
    print(json.dumps([list(r) for r in store.query(sys.argv[2]).rows], default=str))
"""


def query(url: str, sql: str, env: dict[str, str]) -> list[list[Any]]:
    done = subprocess.run(
        [sys.executable, "-c", QUERY, url, sql],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=True,
    )
    rows: list[list[Any]] = json.loads(done.stdout)
    return rows


def apply(url: str, env: dict[str, str], kill_after: float | None) -> tuple[int, list[str]]:
    """`schema apply --materialize --yes` by the hour; with `kill_after`, SIGKILLed that many
    seconds after its first backfill line. Its exit code (-9 when killed) and its lines."""
    process = subprocess.Popen(
        [str(BIN), *APPLY, "--since", "1000d", "--chunk", "1h", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert process.stdout is not None
    lines: list[str] = []
    killer: threading.Timer | None = None
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if kill_after is not None and killer is None and line.startswith("-- backfill ["):
            killer = threading.Timer(kill_after, lambda: os.kill(process.pid, signal.SIGKILL))
            killer.start()
    code = process.wait(timeout=300)
    if killer is not None:
        killer.cancel()
    return code, lines


def copied_chunks(lines: list[str]) -> list[str]:
    """The chunks a run's progress lines say it copied (`-- backfill [start, end): ...`)."""
    return [
        line.split(")")[0]
        for line in lines
        if line.startswith("-- backfill [") and "copied" in line
    ]


@pytest.mark.slow
def test_a_backfill_killed_mid_way_resumes_without_redoing_a_chunk_or_doubling_a_row(
    tmp_path: Path,
) -> None:
    """Twelve hours of events, backfilled an hour at a time, the command SIGKILLed at random
    moments of its backfill three times, then run to its end: every source row is in the
    narrow table exactly once, a chunk said done is never copied again, and each chunk has a
    progress line (the twelve hours, then the open-ended last one)."""
    env = clean_env(tmp_path / "xdg")
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=REPO, env=env, timeout=120)
    rng = random.Random(32)
    runs = [apply(url, env, kill_after=rng.uniform(0.0, 0.6)) for _ in range(3)]
    runs.append(apply(url, env, kill_after=None))
    assert [code for code, _ in runs[:-1]] == [-signal.SIGKILL] * 3, runs
    code, last = runs[-1]
    assert code == 0, "\n".join(last)
    said: set[str] = set()  # chunks a run said it copied: never copied again
    for _, lines in runs:
        copied = set(copied_chunks(lines))
        assert not copied & said, f"copied again: {sorted(copied & said)}"
        said |= copied
    before_last = said - set(copied_chunks(last))
    assert before_last <= {line.split(")")[0] for line in last if "done earlier" in line}
    chunk_lines = [line for line in last if line.startswith("-- backfill [")]
    assert len(chunk_lines) == 13, last  # each hour, and the last one open-ended
    assert chunk_lines[-1].split(")")[0].endswith(", ∞")
    source = query(url, "SELECT id, count() FROM joelclaw.otel_events GROUP BY id ORDER BY id", env)
    narrow = query(
        url,
        "SELECT event_id, count() FROM watchdog.memory_events GROUP BY event_id ORDER BY 1",
        env,
    )
    assert narrow == source


def test_the_printed_backfill_run_twice_copies_each_row_once(store: Store) -> None:
    """The printed script's backfill (one statement, open-ended) after the views: every source
    row once in the narrow table; run again, it adds nothing."""
    table = unique_table()
    sc = every_check()
    sc.write(store, table)
    settings = settings_for(table)
    plan = plan_for(settings, ttl=None, database=f"bf_{uuid.uuid4().hex[:10]}")
    statements = materialize_statements(
        settings, plan, store.table_columns(table), configured_checks(settings), since=T0 - H
    )
    for statement in [*statements, statements[-1]]:
        store.command(statement.sql, statement.params)
    source = id_counts(store, f"SELECT id, count() FROM {table} GROUP BY id")
    narrow = id_counts(store, f"SELECT event_id, count() FROM {plan.table} GROUP BY event_id")
    assert narrow == source
