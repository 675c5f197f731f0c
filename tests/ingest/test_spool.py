"""The spool keeps what was acknowledged until it is in the store, and lets nothing in twice."""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.conftest import ingest_settings
from tests.ingest.test_receiver import logs_request
from watchdog.core.store import Store
from watchdog.daemon.ingest.loader import LoadRequest, ensure_tables, run_loads
from watchdog.daemon.ingest.otlp import LOGS, PROTOBUF, TRACES, decode, to_batch
from watchdog.daemon.ingest.service import REFUSALS_BEFORE_ASIDE, Ingest, destinations
from watchdog.daemon.ingest.spool import Destination, IngestSpool


def batch_of(records: int, first: int = 0):  # type: ignore[no-untyped-def]
    request = decode(LOGS, logs_request(records + first), PROTOBUF)
    del request.resource_logs[0].scope_logs[0].log_records[:first]
    return to_batch(LOGS, request)


TABLES = {LOGS: Destination("chdb:///s", "x.logs"), TRACES: Destination("chdb:///s", "x.traces")}


def spool_at(directory: Path, **kwargs: Any) -> IngestSpool:
    return IngestSpool(directory, TABLES, **kwargs)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def count(store: Store, table: str) -> int:
    return int(store.query(f"SELECT count() FROM {table}").rows[0][0])


def test_same_records_twice_are_kept_once(tmp_path: Path) -> None:
    """A batch put again (a client's retry) is recognised while it waits: one file."""
    spool = spool_at(tmp_path)
    assert spool.put(batch_of(3)) is True
    assert spool.put(batch_of(3)) is False
    assert spool.put(batch_of(2)) is True
    assert len(list(spool.pending())) == 2


def test_retry_after_the_load_is_recognised_after_a_restart(tmp_path: Path) -> None:
    """A batch loaded and done is still known to a restarted spool within the retry window."""
    clock = Clock()
    spool = spool_at(tmp_path, clock=clock)
    spool.put(batch_of(3))
    (load,) = spool.plan()
    spool.done(load)
    restarted = spool_at(tmp_path, clock=clock)
    assert restarted.put(batch_of(3)) is False
    assert list(restarted.pending()) == []


def test_retry_window_ends_the_recognition(tmp_path: Path) -> None:
    """Past `retry_window` a loaded batch is forgotten: the same records are new again."""
    clock = Clock()
    spool = spool_at(tmp_path, retry_window=timedelta(minutes=15), clock=clock)
    spool.put(batch_of(3))
    (load,) = spool.plan()
    spool.done(load)
    clock.now += 16 * 60
    spool.prune()
    assert spool_at(tmp_path, clock=clock).put(batch_of(3)) is True


def test_interrupted_write_is_discarded_at_start(tmp_path: Path) -> None:
    """A half-written batch (a crash before the 200) is never loaded: nothing was acknowledged."""
    spool_at(tmp_path)
    (tmp_path / "tmp" / "half.tmp").write_bytes(b'["12')
    spool = spool_at(tmp_path)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert spool.queued_bytes == 0


def test_load_redone_after_a_crash_is_inserted_once(store: Store, tmp_path: Path) -> None:
    """Inserted but not marked done (a crash): the restarted spool redoes it, the store keeps one copy."""
    settings = ingest_settings(tmp_path)
    tables = {LOGS: settings.ingest.logs_table, TRACES: settings.ingest.traces_table}
    spool = IngestSpool(tmp_path / "spool", destinations(settings))
    spool.put(batch_of(5))
    spool.put(batch_of(4, first=5))
    loads = tuple(spool.plan())
    request = LoadRequest(store=settings.store, tables=tables, loads=loads)
    result = run_loads(store, request)  # the insert happened; then the daemon was killed
    assert all(o.loaded for o in result.outcomes)
    restarted = IngestSpool(tmp_path / "spool", destinations(settings))
    redo = tuple(restarted.planned_loads())
    assert redo == loads
    assert restarted.plan() == []  # its batches are not planned a second time
    again = run_loads(store, LoadRequest(store=settings.store, tables=tables, loads=redo))
    assert all(o.loaded for o in again.outcomes)
    for load in redo:
        restarted.done(load)
    assert count(store, tables[LOGS]) == 9
    assert restarted.queued_bytes == 0


def test_rows_the_store_refuses_are_set_aside(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch the store cannot parse is moved to quarantine after a few rounds; later ones still load."""
    settings = ingest_settings(tmp_path)
    ingest = Ingest(settings, open_fn=lambda request: contextlib.nullcontext(store))
    ingest.spool.put(batch_of(2))
    ingest.round()
    (tmp_path / "spool" / "batches" / "logs-broken.jsonl").write_bytes(b'["not a row"]\n')
    ingest.spool = IngestSpool(tmp_path / "spool", destinations(settings))  # a restart
    ingest.receiver.spool = ingest.spool
    with caplog.at_level(logging.ERROR, logger="watchdog.daemon.ingest.spool"):
        for _ in range(REFUSALS_BEFORE_ASIDE):
            ingest.round()
    assert [p.name for p in (tmp_path / "spool" / "quarantine").iterdir()] == ["logs-broken.jsonl"]
    assert "quarantine" in caplog.text
    ingest.spool.put(batch_of(3, first=2))
    assert not ingest.round().problem
    assert count(store, settings.ingest.logs_table) == 5


def test_table_without_a_deduplication_window_is_named(store: Store, tmp_path: Path) -> None:
    """A table someone else created without the window gets a warning saying how to add it."""
    settings = ingest_settings(tmp_path)
    table = settings.ingest.logs_table
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(
        f"CREATE TABLE {table} (Timestamp DateTime64(9)) ENGINE = MergeTree ORDER BY Timestamp"
    )
    warnings = ensure_tables(store, {LOGS: table})
    assert len(warnings) == 1
    assert "MODIFY SETTING non_replicated_deduplication_window" in warnings[0]
    assert ensure_tables(store, {TRACES: settings.ingest.traces_table}) == []
