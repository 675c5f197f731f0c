"""Loading spooled batches into the store: the exporter's tables, one insert per load.

This is the receiver's only store work. `run_loads` creates the tables when
they are absent (the exporter's DDL, checks.source_ddl.EXPORTER_DDL, plus a
deduplication window) and inserts each planned load with its token: a load
inserted twice (a crash between the insert and its being marked done) is
kept once. In the daemon it runs in a short-lived child (`ChildLoads`), for
the reasons ticks do (watchdog.daemon.child): the embedded engine never
lives in the daemon, whose memory stays flat, and the store is held only
while loading, so `check`, `status` and the daemon's own runs take turns with it
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from checks.source_ddl import EXPORTER_DDL
from watchdog.core.errors import StoreError, StoreLockedError
from watchdog.core.logs import DEFAULT_LOGS, LogSetup, configure_logging
from watchdog.core.settings import StoreSettings
from watchdog.core.store import Store, open_store
from watchdog.daemon.ingest.signals import SIGNALS, Signal
from watchdog.daemon.ingest.spool import Load

log = logging.getLogger(__name__)

INPUT_FORMAT = "JSONCompactEachRow"
# Blocks whose insert tokens a table remembers: a load redone after a crash is dropped as
# long as fewer blocks were inserted since; loads are redone before any new one.
DEDUP_WINDOW = 1000
# Each load is one block, so that an insert the store refuses wrote nothing (it may then be
# retried in parts, each with a token of its own); its records may span any number of days.
INSERT_SETTINGS = {
    "min_insert_block_size_rows": 1 << 40,
    "min_insert_block_size_bytes": 1 << 40,
    "max_partitions_per_insert_block": 0,
}


@dataclass(frozen=True)
class LoadRequest:
    """What one round of loading needs; crosses to the child process."""

    store: StoreSettings
    tables: Mapping[str, str]  # signal -> table: created when absent
    loads: tuple[Load, ...]
    lock_wait_s: float = 1.0  # how long to wait for a store another process holds
    logs: LogSetup = DEFAULT_LOGS  # how the load process logs


@dataclass(frozen=True)
class LoadOutcome:
    token: str
    loaded: bool
    problem: str = ""
    # The store answered refusing this load (its rows: not in the store). False when the outcome
    # is unknown (no answer, a timeout, a lost answer: the rows may be in) or the store cannot
    # take anything now: the load is then tried again whole, under its own token.
    refused: bool = False


@dataclass
class LoadResult:
    outcomes: list[LoadOutcome] = field(default_factory=list)
    problem: str = ""  # the store could not be used at all
    busy: bool = False  # another process holds the embedded store
    warnings: list[str] = field(default_factory=list)


OpenLoadStore = Callable[[LoadRequest], AbstractContextManager[Store]]


def open_request_store(request: LoadRequest) -> AbstractContextManager[Store]:
    """The configured store, waiting at most `lock_wait_s` for another process to let go."""
    return open_store(
        request.store.url,
        query_timeout_s=request.store.query_timeout.total_seconds(),
        lock_timeout_s=request.lock_wait_s,
        create=True,
        tls=request.store.tls,
    )


def exporter_table_sql(signal: str, table: str) -> str:
    """The exporter's CREATE TABLE for `signal`, with the deduplication window the loads need."""
    return EXPORTER_DDL[Signal(signal).value].format(
        table=table, settings=f", non_replicated_deduplication_window = {DEDUP_WINDOW}"
    )


def ensure_tables(store: Store, tables: Mapping[str, str]) -> list[str]:
    """Create each table (and its database) when absent; warnings for tables that cannot dedupe."""
    warnings = []
    for kind, table in tables.items():
        database, _, name = table.partition(".")
        store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        store.command(exporter_table_sql(kind, table))
        found = store.query(
            "SELECT engine, create_table_query FROM system.tables"
            " WHERE database = {db:String} AND name = {name:String}",
            {"db": database, "name": name},
        ).rows
        engine, ddl = (str(found[0][0]), str(found[0][1])) if found else ("", "")
        if not engine.startswith("Replicated") and not _has_window(ddl):
            warnings.append(
                f"{table} has no non_replicated_deduplication_window: a load redone after a"
                f" crash may add its rows twice (ALTER TABLE {table} MODIFY SETTING"
                f" non_replicated_deduplication_window = {DEDUP_WINDOW})"
            )
    return warnings


def _has_window(ddl: str) -> bool:
    marker = "non_replicated_deduplication_window = "
    at = ddl.find(marker)
    return at >= 0 and not ddl[at + len(marker) :].startswith("0")


def _chunks(files: tuple[str, ...]) -> Iterator[bytes]:
    for name in files:
        try:
            with open(name, "rb") as data:
                yield from iter(lambda: data.read(1024 * 1024), b"")
        except FileNotFoundError:  # a batch another round loaded already: nothing to add
            continue


def run_loads(store: Store, request: LoadRequest) -> LoadResult:
    """Create the tables, then insert each load with its token, oldest first.

    A load the store refuses (it answered so: the rows are not in) is that load's problem,
    whatever the words: the loads after it go on. Any other failure ends the round, the load
    kept as it is: an insert whose answer was lost or came too late may be in the store, so it
    is only ever sent again whole, under the same token (as after a crash), never split.
    """
    result = LoadResult()
    result.warnings = ensure_tables(store, request.tables)
    for load in request.loads:
        try:
            store.insert_formatted(
                load.table,
                SIGNALS[Signal(load.signal)].columns,
                _chunks(load.files),
                INPUT_FORMAT,
                {**INSERT_SETTINGS, "insert_deduplication_token": load.token},
            )
        except StoreError as exc:
            result.outcomes.append(LoadOutcome(load.token, False, exc.problem, exc.refused))
            if not exc.refused:  # unknown outcome, or the store fails: the rest waits
                break
        else:
            result.outcomes.append(LoadOutcome(load.token, True))
    return result


def load_round(request: LoadRequest, open_fn: OpenLoadStore = open_request_store) -> LoadResult:
    """One round: open the store, load, close it; never raises for a store problem."""
    try:
        with open_fn(request) as store:
            return run_loads(store, request)
    except StoreLockedError as exc:
        return LoadResult(problem=exc.problem, busy=True)
    except StoreError as exc:
        return LoadResult(problem=exc.problem)


# -- in a child process ---------------------------------------------------------------------


def _child_main(request: LoadRequest, writer: Connection) -> None:
    """The child: load, send the result back; the daemon's signals are the daemon's."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    configure_logging(request.logs)
    result = load_round(request)
    try:
        writer.send(result)
        writer.close()
    except OSError:  # the daemon died meanwhile: the load is redone by the next one, once
        return


class ChildLoads:
    """Runs each round in a fresh process from the forkserver the ticks use (no engine in it)."""

    def __init__(self, timeout: timedelta) -> None:
        self.timeout = timeout
        self._ctx = multiprocessing.get_context("forkserver")
        self._child: Any = None

    def run(self, request: LoadRequest) -> LoadResult:
        reader, writer = self._ctx.Pipe(duplex=False)
        child = self._ctx.Process(
            target=_child_main, args=(request, writer), name="memory-watchdog-load"
        )
        child.start()
        self._child = child
        writer.close()
        try:
            if not reader.poll(self.timeout.total_seconds()):
                child.kill()
                return LoadResult(problem=f"the load process took longer than {self.timeout}")
            result: LoadResult = reader.recv()
        except EOFError:
            child.join(timeout=10)
            return LoadResult(problem=f"the load process ended with exit code {child.exitcode}")
        finally:
            reader.close()
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join(timeout=10)
            self._child = None
        return result

    def kill(self) -> None:
        child = self._child
        if child is not None and child.is_alive():
            child.kill()
