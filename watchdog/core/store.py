"""Store access through clickhouse-connect: the embedded engine (chdb) or a server.

`open_store` is the one way in. It opens a client for the duration of an evaluation and closes
it after, so that on the embedded engine (one process per store directory) `check` and the
daemon can take turns. Every query carries a timeout, every data value travels as a bound
parameter, and every error leaves this module as a `StoreError` whose URL has its password
masked, the driver's error worded as one line (`describe_clickhouse_error`) and marked when the
store refused the statement (`refused_by_store`)
(docs/operations.md#pointing-it-at-a-clickhouse-server).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.core.errors import MissingStoreError, StoreError, StoreLockedError, StoreURLUsageError
from watchdog.core.settings import DEMO_POINTER, DEMO_STORE_DIR, STORE_DIR, StoreSettings
from watchdog.core.settings.model import StoreTLS
from watchdog.core.urls import (
    MEMORY,
    StoreURL,
    StoreURLError,
    mask_url,
    mask_urls_in,
    parse_store_url,
)

# Settings that cut the engine's work on a query's text before it reads a row, sent where the
# server knows them (an older one would refuse an unknown setting). The analyzer's AND-chain pass
# derives `indexHint` comparisons from chains such as `a < b AND b < 5`; the scans' many
# `x >= lo AND x <= hi` conditions inside lambdas give it no index to prune with, and it was
# a third of the CPU of an evaluation on a small table (docs/performance.md#planning-a-query).
PLANNING: Mapping[str, Any] = {"optimize_and_compare_chain": 0}


@dataclass
class Transfer:
    """What the store sent to Python: rows and bytes, summed over queries."""

    queries: int = 0
    result_rows: int = 0
    read_rows: int = 0
    read_bytes: int = 0


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def first(self) -> dict[str, Any]:
        """The first row as a dict (aggregate queries return exactly one)."""
        return dict(zip(self.columns, self.rows[0], strict=True)) if self.rows else {}

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


class Store:
    """A clickhouse-connect client with the watchdog's conventions.

    Queries take SQL text and a dict of bound parameters (`{name:Type}`
    placeholders) and return plain tuples; the rows and bytes that crossed
    from ClickHouse to Python are tallied in `transfer`.
    """

    def __init__(self, client: Any, url: StoreURL, *, query_timeout_s: float = 120.0) -> None:
        self._client = client
        self.url = url
        self.query_timeout_s = query_timeout_s
        self.transfer = Transfer()
        known = getattr(client, "server_settings", None) or {}
        self._planning = {k: v for k, v in PLANNING.items() if k in known}

    @property
    def client(self) -> Any:
        return self._client

    def _settings(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {
            **(extra or {}),
            "max_execution_time": max(1, int(self.query_timeout_s)),
            # On a Distributed source, an IN subquery over the same table (the deviation
            # evidence lookup) runs once on the initiator and its set is sent to the
            # shards, instead of being refused as a double-distributed subquery.
            "distributed_product_mode": "global",
            **self._planning,
        }

    def query(
        self,
        sql: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        extra_settings: Mapping[str, Any] | None = None,
    ) -> QueryResult:
        """Rows of a SELECT; `extra_settings` are ClickHouse settings for this query only."""
        try:
            result = self._client.query(
                sql, parameters=dict(parameters or {}), settings=self._settings(extra_settings)
            )
        except _driver_errors() as exc:
            raise StoreError(
                self.url.masked, describe_clickhouse_error(exc), refused=refused_by_store(exc)
            ) from exc
        rows = list(result.result_rows)
        if not self.url.embedded:
            self._check_complete(result.summary, len(rows))
        self._tally(result.summary, len(rows))
        return QueryResult(tuple(result.column_names), rows)

    def _check_complete(self, summary: Mapping[str, Any] | None, received: int) -> None:
        """Refuse an HTTP response that was cut before its end.

        clickhouse-connect reads a connection closed inside the response
        headers (before the body's framing is known) as an empty result with
        no error. ClickHouse sends `X-ClickHouse-Summary` with every result,
        and its `result_rows` never exceeds the rows the body carries, so an
        empty result without that header, or fewer rows than it counts, is a
        cut response: without this, a selective query (the table's columns,
        the deviation aggregation) would read as "nothing there".
        """
        summary = summary or {}
        announced = int(summary.get("result_rows", 0) or 0)
        if (received == 0 and "read_rows" not in summary) or announced > received:
            raise StoreError(
                self.url.masked,
                "incomplete response: the connection was cut inside the response"
                f" ({received} of {announced or 'an unknown number of'} rows arrived;"
                " or a proxy strips ClickHouse's X-ClickHouse-Summary header)",
            )

    def aggregate(self, sql: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The one row of an aggregate query, as a dict.

        An aggregate without GROUP BY always returns exactly one row; none
        means the response was cut short (clickhouse-connect reads a
        connection closed inside the headers as an empty result), which must
        never pass for "nothing happened".
        """
        result = self.query(sql, parameters)
        if len(result.rows) != 1:
            raise StoreError(
                self.url.masked,
                f"incomplete response: an aggregate query returned {len(result.rows)} rows",
            )
        return result.first()

    def command(
        self,
        sql: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        extra_settings: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            return self._client.command(
                sql, parameters=dict(parameters or {}), settings=self._settings(extra_settings)
            )
        except _driver_errors() as exc:
            raise StoreError(
                self.url.masked, describe_clickhouse_error(exc), refused=refused_by_store(exc)
            ) from exc

    def insert(
        self, table: str, rows: Sequence[Sequence[Any]], column_names: Sequence[str]
    ) -> None:
        if not rows:
            return
        try:
            self._client.insert(table, list(rows), column_names=list(column_names))
        except _driver_errors() as exc:
            raise StoreError(
                self.url.masked, describe_clickhouse_error(exc), refused=refused_by_store(exc)
            ) from exc

    def insert_formatted(
        self,
        table: str,
        column_names: Sequence[str],
        data: Iterable[bytes],
        fmt: str,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """Insert rows already written in ClickHouse's input format `fmt` (e.g. JSONCompactEachRow).

        `settings` are the insert's own (an `insert_deduplication_token`, ...). A StoreError
        says with `refused` whether the store refused the rows (they are not in) or the outcome
        is unknown (they may be in: insert them again only under the same token).
        """
        try:
            self._client.raw_insert(
                table,
                list(column_names),
                insert_block=data,
                settings={**self._settings(), **dict(settings or {})},
                fmt=fmt,
            )
        except _driver_errors() as exc:
            raise StoreError(
                self.url.masked, describe_clickhouse_error(exc), refused=refused_by_store(exc)
            ) from exc

    def table_columns(self, table: str) -> dict[str, str]:
        """Column name -> type of `table`; StoreError naming it when it does not exist."""
        database, _, name = table.rpartition(".")
        result = self.query(
            "SELECT name, type FROM system.columns"
            " WHERE database = {db:String} AND table = {table:String}",
            {"db": database or self.current_database(), "table": name},
        )
        if not result.rows:
            raise StoreError(self.url.masked, f"table {table} not found")
        return {str(col): str(typ) for col, typ in result.rows}

    def has_table(self, table: str) -> bool:
        """Whether `table` (`database.table`) exists."""
        database, _, name = table.rpartition(".")
        result = self.query(
            "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {table:String}",
            {"db": database or self.current_database(), "table": name},
        )
        return bool(result.rows and int(result.rows[0][0]))

    def table_facts(self, table: str, columns: str) -> tuple[str, ...] | None:
        """`columns` (SQL: our own names of system.tables columns, never data) of `table`
        (`db.name`, or a name in the current database); None when there is no such table."""
        database, _, name = table.rpartition(".")
        rows = self.query(
            f"SELECT {columns} FROM system.tables WHERE name = {{t:String}}"
            " AND database = if({db:String} = '', currentDatabase(), {db:String})",
            {"t": name, "db": database},
        ).rows
        return tuple(str(v) for v in rows[0]) if rows else None

    def current_database(self) -> str:
        return str(self.query("SELECT currentDatabase()").rows[0][0])

    def _tally(self, summary: Mapping[str, Any] | None, result_rows: int) -> None:
        self.transfer.queries += 1
        self.transfer.result_rows += result_rows
        summary = summary or {}
        self.transfer.read_rows += int(summary.get("read_rows", 0) or 0)
        self.transfer.read_bytes += int(summary.get("read_bytes", 0) or 0)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()


def _lock_holder(directory: str) -> int | None:
    """The PID written in the embedded store's status file, when that process is alive."""
    try:
        text = (Path(directory) / "status").read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"PID:\s*(\d+)", text)
    if not match:
        return None
    pid = int(match.group(1))
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _flock_holder(directory: str) -> int | None:
    """The process holding the engine's lock (its flock on `status`, in /proc/locks), when another
    one does: it names a holder that has just started, before it writes its PID in the file."""
    try:
        status = (Path(directory) / "status").stat()
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    device = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            pid = int(fields[4]) if fields[4].isdigit() else 0
            return pid if pid and pid != os.getpid() else None
    return None


def _describe_process(pid: int) -> str:
    try:
        raw = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        raw = ""
    cmdline = mask_urls_in(" ".join(raw.split()[:3]))[:80]
    return f"process {pid} ({cmdline})" if cmdline else f"process {pid}"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence what the embedded engine prints on fd 2 while it opens (our error says it)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _demo_store_beside(missing: Path) -> str | None:
    """The demo's store when `missing` is a data directory's default store and the demo ran:
    the one it filled last (`DEMO_POINTER`, wherever its `--store` put it), else its own."""
    if missing.name != STORE_DIR:
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        url = (missing.parent / DEMO_POINTER).read_text(encoding="utf-8").strip()
        if url.startswith("chdb://") and Path(url.removeprefix("chdb://")).is_dir():
            return url
    demo = missing.with_name(DEMO_STORE_DIR)
    return f"chdb://{demo}" if demo.is_dir() else None


# Attempts at opening an embedded store that fails with no live holder of its lock.
_OPEN_ATTEMPTS = 4


def _read_only(directory: str) -> str:
    """What to say of an embedded store in a directory this process cannot write."""
    return (
        f"the store directory {directory} is read-only: the embedded engine writes to its"
        " directory even to read (its lock and logs); give it a writable one, or point"
        " --store at a ClickHouse server"
    )


def _connect_embedded(
    url: StoreURL, lock_timeout_s: float, *, create: bool, engine_config: Path | None = None
) -> Any:
    import clickhouse_connect  # deferred: importing the engine costs half a second

    assert url.path is not None
    if url.path != MEMORY and not create and not Path(url.path).is_dir():
        raise MissingStoreError(url.masked, _demo_store_beside(Path(url.path)))
    if url.path != MEMORY:
        try:
            Path(url.path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                url.masked, f"cannot create the store directory: {exc.strerror}"
            ) from None
    deadline = time.monotonic() + lock_timeout_s
    unexplained = 0
    while True:
        try:
            with _quiet_stderr():
                if engine_config is not None and url.path != MEMORY:
                    return clickhouse_connect.get_client(
                        interface="chdb",
                        path=url.path,
                        chdb_options={"config-file": str(engine_config)},
                    )
                return clickhouse_connect.get_client(dsn=url.raw)
        except _driver_errors() as exc:
            holder = _lock_holder(url.path) if url.path != MEMORY else None
            if holder is None and url.path != MEMORY:
                holder = _flock_holder(url.path)
            if holder is None and url.path != MEMORY and not os.access(url.path, os.W_OK):
                raise StoreError(url.masked, _read_only(url.path)) from None
            if holder is None:
                # The engine words a held lock only on stderr, and a holder that has just
                # exited (a short-lived run or load of the daemon) leaves no live PID behind:
                # try again a few times before calling the store broken.
                unexplained += 1
                if url.path != MEMORY and unexplained < _OPEN_ATTEMPTS:
                    time.sleep(0.2)
                    continue
                raise StoreError(
                    url.masked, f"cannot open the embedded store: {describe_clickhouse_error(exc)}"
                ) from exc
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    url.masked,
                    f"the embedded store is held by {_describe_process(holder)}; "
                    f"waited {lock_timeout_s:g}s (stop it, or run this between its runs)",
                ) from None
            time.sleep(0.2)


def _connect_http(url: StoreURL, query_timeout_s: float, tls: StoreTLS) -> Any:
    import clickhouse_connect  # deferred: importing the engine costs half a second

    try:
        return clickhouse_connect.get_client(
            host=url.host,
            port=url.port,
            username=url.username or "default",
            password=url.password or "",
            database=url.database or "",
            secure=url.secure,
            verify=tls.verify,
            ca_cert=tls.ca_file,
            client_cert=tls.client_cert,
            client_cert_key=tls.client_key,
            connect_timeout=min(10, query_timeout_s),
            send_receive_timeout=query_timeout_s,
            autogenerate_session_id=False,
        )
    except _driver_errors() as exc:
        raise StoreError(url.masked, describe_clickhouse_error(exc)) from None


NO_TLS = StoreTLS()  # the system's CA bundle, verified, no client certificate


def open_configured(
    settings: StoreSettings, *, create: bool = False
) -> contextlib.AbstractContextManager[Store]:
    """`open_store` with the configured URL, query timeout and lock timeout."""
    return open_store(
        settings.url,
        query_timeout_s=settings.query_timeout.total_seconds(),
        lock_timeout_s=settings.lock_timeout.total_seconds(),
        create=create,
        tls=settings.tls,
    )


@contextlib.contextmanager
def open_store(
    url: str | StoreURL,
    *,
    query_timeout_s: float = 120.0,
    lock_timeout_s: float = 10.0,
    create: bool = False,
    engine_config: Path | None = None,
    tls: StoreTLS = NO_TLS,
) -> Iterator[Store]:
    """Open the store for one evaluation and close it after.

    An embedded store that does not exist yet is created only with `create`
    (the demo, `schema apply`, a daemon's first run); otherwise it is a
    `MissingStoreError`, so that a read-only command never leaves an empty
    store directory behind. `engine_config`: an embedded engine's own config
    file (the tests' cluster of local shards, tests/cluster.py). `tls`: the CA file, verify,
    client certificate and key for an https:// server (`[store]`).
    """
    if isinstance(url, StoreURL):
        parsed = url
    else:
        try:
            parsed = parse_store_url(url)
        except StoreURLError as exc:
            raise StoreURLUsageError(mask_url(url), str(exc)) from None
    if parsed.embedded:
        client = _connect_embedded(
            parsed, lock_timeout_s, create=create, engine_config=engine_config
        )
    else:
        client = _connect_http(parsed, query_timeout_s, tls)
    store = Store(client, parsed, query_timeout_s=query_timeout_s)
    try:
        yield store
    finally:
        store.close()


# ---- what a driver error means ------------------------------------------------------------

# ClickHouse's symbolic error names (the driver carries them) and what they mean for us.
_MEANINGS = {
    "UNKNOWN_TABLE": "table not found",
    "UNKNOWN_DATABASE": "database not found",
    "UNKNOWN_IDENTIFIER": "column not found",
    "NO_SUCH_COLUMN_IN_TABLE": "column not found",
    "AUTHENTICATION_FAILED": "authentication failed (check user and password)",
    "REQUIRED_PASSWORD": "authentication failed (check user and password)",
    "UNKNOWN_USER": "authentication failed (unknown user)",
    # Reading the source needs SELECT; `--notify` and the daemon also write their own database.
    "ACCESS_DENIED": "access denied (the user lacks a grant; see docs/operations.md, Grants)",
    "TIMEOUT_EXCEEDED": "query timed out (raise store.query_timeout)",
    "READONLY": "the user is read-only (the watchdog's own database needs writes)",
    "NOT_ENOUGH_SPACE": "the store's disk is full",
    "CANNOT_WRITE_TO_FILE_DESCRIPTOR": "the store could not write to its disk",
}


def _server_detail(text: str) -> str:
    """ClickHouse's own words without the code prefix, the error name and the version."""
    detail = re.search(r"DB::Exception: (.*?)(?: \(\w+\))?(?: \(version.*)?$", text)
    return detail.group(1) if detail else text


def describe_clickhouse_error(exc: BaseException) -> str:
    """One line for a driver error: its meaning from the server's error name, then its words.

    Server errors are classified by the name the driver carries (`UNKNOWN_TABLE`);
    transport errors, which have none, by their kind.
    """
    text = mask_urls_in(" ".join(str(exc).split()))
    name = getattr(exc, "name", None)
    if name in _MEANINGS:
        return f"{_MEANINGS[name]}: {_server_detail(text)}"[:400]
    if name:
        return f"{_server_detail(text)} ({name})"[:400]
    if isinstance(exc, TimeoutError) or "timed out" in text.lower():
        return "query timed out (raise store.query_timeout)"
    if "SSLError" in text or "[SSL" in text:
        return _tls_problem(text)
    if "Unexpected response to server version query" in text:
        return (
            "unexpected response to the first query (the connection was cut,"
            " or the server at this URL is not ClickHouse)"
        )
    if name_not_resolved(exc):
        return NOT_RESOLVED
    if isinstance(exc, ConnectionRefusedError) or any(s in text for s in _UNREACHABLE_SIGNS):
        return "unreachable (connection refused or no route to the server)"
    if any(sign in text for sign in _CUT_SIGNS):
        return "the connection was reset or cut mid-response (check the server and any proxy)"
    return text[:400]


def _tls_problem(text: str) -> str:
    """A TLS handshake that failed, with OpenSSL's reason and the `[store]` key that helps."""
    found = re.search(r"\[SSL: (\w+)\] ([^'(]+)", text) or re.search(
        r"SSL\w*Error\(\w+\(\d+, '([^'(]+)", text
    )
    reason = found.group(found.lastindex or 0).strip() if found else "no reason given"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            f"TLS: the server's certificate could not be verified ({reason}); set"
            " store.ca_file to the CA that signed it (docs/operations.md#tls-to-a-clickhouse-server)"
        )
    return (
        f"TLS handshake failed ({reason}); check that the port speaks TLS, and set"
        " store.client_cert and store.client_key when the server asks for a client certificate"
    )


NOT_RESOLVED = "the host name could not be resolved (DNS): check the host in the URL"

# How a host name that did not resolve reads: the resolver's words (glibc, musl, macOS,
# Windows), and urllib3's, which clickhouse-connect passes on as text.
_UNRESOLVED_SIGNS = (
    "NameResolutionError",
    "Failed to resolve",
    "Name or service not known",
    "Name does not resolve",
    "nodename nor servname",
    "Temporary failure in name resolution",
    "No address associated with hostname",
    "getaddrinfo failed",
)


def name_not_resolved(exc: BaseException) -> bool:
    """Whether a transport error is a host name that could not be resolved (not a refusal: no
    server was ever asked), for the store and the receivers alike."""
    reason = getattr(exc, "reason", None)  # urllib's URLError wraps the resolver's error
    if isinstance(exc, socket.gaierror) or isinstance(reason, socket.gaierror):
        return True
    return any(sign in str(exc) for sign in _UNRESOLVED_SIGNS)


# How clickhouse-connect (urllib3) words a server it cannot reach, and a connection that broke.
_UNREACHABLE_SIGNS = (
    "HTTPConnectionPool",
    "HTTPSConnectionPool",
    "Connection refused",
    "Max retries",
)
_CUT_SIGNS = ("Connection aborted", "Connection broken", "Connection reset", "Stream failed")


# Server errors that say the store cannot run a statement now (its time, its load, its disk, its
# replication), not that the statement or its data is wrong: the same statement may succeed
# later, and an insert may even have been done (UNKNOWN_STATUS_OF_INSERT, a timeout after the
# write). By code, which the driver carries even when it hides the server's words.
_NOT_REFUSALS = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE: the request was cut on its way
        159,  # TIMEOUT_EXCEEDED
        160,  # TOO_SLOW
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        999,  # KEEPER_EXCEPTION
    }
)


def refused_by_store(exc: BaseException) -> bool:
    """Whether a driver error is the store's answer refusing the statement (it was not done).

    The receiver's loads rely on it: only then may a load be split, or set aside
    (docs/guarantees.md#hardening-round-4). A transport error (no answer, a timeout, a
    connection cut after the request went) carries no server code: its outcome is unknown. A
    server error about the store's own condition (`_NOT_REFUSALS`) is no refusal of the
    statement either.
    """
    code = getattr(exc, "code", None)
    return isinstance(code, int) and code > 0 and code not in _NOT_REFUSALS


def _driver_errors() -> tuple[type[BaseException], ...]:
    """What the drivers raise for a store problem; anything else is a bug of ours."""
    # Deferred: importing clickhouse_connect loads the engine's driver (half a second).
    from clickhouse_connect.driver.exceptions import ClickHouseError, StreamCompleteException

    return (ClickHouseError, StreamCompleteException, OSError)
