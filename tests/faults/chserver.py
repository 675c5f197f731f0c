"""A ClickHouse HTTP interface on 127.0.0.1, served by this process's embedded engine (chdb).

`ClickHouseHTTPServer` lets clickhouse-connect's real HTTP client (urllib3,
Native decoding, error parsing, retries) run against the embedded engine that
the tests already have open, since no ClickHouse server can be installed here.

chdb hosts one engine per process, bound to one directory. The server is
therefore handed an already-open clickhouse-connect chdb client (or a
`watchdog.store.Store` wrapping one) and opens its own connection handle on
that same engine, the way clickhouse-connect gives each client its own handle:
the HTTP side's `USE` and `SET` state never leaks into the caller's client,
and both see the same tables. Requests run one at a time under a lock.

What a request gets, as ClickHouse's HTTP interface does it:

- `GET /ping` (and `GET /` with no query) answers `Ok.`.
- The query comes from the POST body, the `query` URL parameter, or both
  (the parameter, a newline, then the body), or from `multipart/form-data`
  fields `query` and `param_*` (clickhouse-connect's form encoding).
- `param_<name>` values are server-side bound parameters (`{name:Type}`),
  passed to the engine as ClickHouse text, as the HTTP interface does.
- `database` (or the `X-ClickHouse-Database` header) selects the database;
  `default_format` (or `X-ClickHouse-Format`) the output format when the
  query has no FORMAT clause, TabSeparated otherwise. The engine writes the
  response bytes itself; nothing is re-encoded in Python.
- Other URL parameters are settings and are applied with `SET` (so
  `max_execution_time` is honoured and an unknown setting fails with code
  115, as on a server); transport-only ones (`session_id`,
  `wait_end_of_query`, `send_progress_in_http_headers`, ...) are ignored.
- `INSERT ... FORMAT <fmt>` followed by data (in the body, possibly after the
  statement, as clickhouse-connect sends it) runs as `INSERT ... FROM INFILE`
  on a temporary file holding the data.
- Request bodies with `Content-Encoding` lz4 (frame), zstd, gzip or deflate
  are decompressed; responses are compressed with the client's first
  supported `Accept-Encoding` when `enable_http_compression=1`.
- Responses carry `X-ClickHouse-Query-Id`, `X-ClickHouse-Format` (result
  producing statements only), `X-ClickHouse-Timezone`,
  `X-ClickHouse-Summary` (read/written/result rows and bytes, elapsed_ns)
  and `X-ClickHouse-Server-Display-Name`.
- Errors are answered like ClickHouse: the status it maps the error to
  (404 for UNKNOWN_TABLE, 400 for SYNTAX_ERROR, 403 for
  AUTHENTICATION_FAILED, 408 for TIMEOUT_EXCEEDED, 500 otherwise), an
  `X-ClickHouse-Exception-Code` header and a `Code: N. DB::Exception: ...
  (NAME) (version V)` body.
- With `users={"default": "secret"}`, credentials from `X-ClickHouse-User` /
  `X-ClickHouse-Key`, HTTP basic auth, or `user` / `password` URL parameters
  are checked; a mismatch is code 516 with HTTP 403.
- Users named in `select_only` hold only SELECT grants: any statement that
  writes (INSERT, CREATE, ALTER, DROP, ...) fails as ClickHouse fails it for
  a missing grant, code 497 ACCESS_DENIED with HTTP 403.

Not supported: sessions (`session_id` is ignored; every request shares the
server's one handle, so a `SET` or temporary table sent as a query persists),
progress headers, ClickHouse's own block compression (`compress=1` /
`decompress=1`, answered with NOT_IMPLEMENTED), external data (multipart
file parts, likewise), streaming (a result is built whole before it is sent),
and any interface other than HTTP. With `tls` (a server-side `ssl.SSLContext`) it
serves HTTPS, each connection's handshake in its own handler thread.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections import deque
from collections.abc import Collection, Iterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

from tests.faults.chhandler import _Engine, _Handler, _HTTPServer
from tests.faults.chprotocol import (
    _CHDB_SPECIAL_FORMATS,
    _DDL_TARGET_RE,
    _HTTP_ONLY_SETTINGS,
    _READONLY_KEYWORDS,
    _RESULT_KEYWORDS,
    _SETTINGS_SPLIT_RE,
    _TRAILING_FORMAT_RE,
    _TRANSPORT_PARAMS,
    HOST,
    ClickHouseError,
    RequestRecord,
    _connection_string_of,
    _first_keyword,
    _Outcome,
    _quote_sql_string,
    _split_data_insert,
)


class ClickHouseHTTPServer:
    """ClickHouse's HTTP interface on 127.0.0.1, backed by the process's embedded engine.

    `client` is an open embedded clickhouse-connect client (or a Store wrapping
    one); the server opens its own handle on that engine in `start()` and
    closes it in `stop()`, which must come before the engine's last client
    closes if the engine is to be released. `users` maps user names to
    passwords; without it any credentials are accepted.
    """

    def __init__(
        self,
        client: Any,
        *,
        users: Mapping[str, str] | None = None,
        display_name: str = "chdb-harness",
        default_database: str = "default",
        select_only: Collection[str] = (),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._connection_string = _connection_string_of(client)
        self.users = dict(users) if users is not None else None
        self.select_only = frozenset(select_only)
        self.display_name = display_name
        self.tls = tls
        self.default_database = default_database
        self.version = ""
        self.timezone = "UTC"
        self._engine: _Engine | None = None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tmpdir: str | None = None
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._log: deque[RequestRecord] = deque(maxlen=1000)
        self._insert_seq = 0
        self._compression_default = "0"

    # ---- lifecycle ---------------------------------------------------------

    def start(self) -> ClickHouseHTTPServer:
        """Open the engine handle and serve on an ephemeral 127.0.0.1 port."""
        if self._httpd is not None:
            return self
        engine = _Engine(self._connection_string)
        try:
            first = engine.run(
                "SELECT version(), timezone()",
                "TabSeparated",
                params={},
                settings={},
                database=self.default_database,
            )
            self.version, self.timezone = first.bytes().decode().rstrip("\n").split("\t")[:2]
            compression = engine.run(
                "SELECT value FROM system.settings WHERE name = 'enable_http_compression'",
                "TabSeparated",
                params={},
                settings={},
                database=self.default_database,
            )
            self._compression_default = compression.bytes().decode().strip() or "0"
            self._tmpdir = tempfile.mkdtemp(prefix="chserver-")
            httpd = _HTTPServer((HOST, 0), _Handler)
            if self.tls is not None:
                httpd.socket = self.tls.wrap_socket(
                    httpd.socket, server_side=True, do_handshake_on_connect=False
                )
        except BaseException:
            engine.close()
            raise
        httpd.harness = self
        self._engine = engine
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"chserver-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and close the engine handle."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        with self._conn_lock:
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> ClickHouseHTTPServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- addressing --------------------------------------------------------

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return int(self._httpd.server_address[1])

    def url(
        self, user: str = "default", password: str | None = None, database: str = "default"
    ) -> str:
        """`http(s)://user:password@127.0.0.1:port/database`, the password defaulting to `users`'."""
        if password is None:
            password = (self.users or {}).get(user, "")
        scheme = "https" if self.tls is not None else "http"
        return (
            f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{HOST}:{self.port}/"
            f"{quote(database, safe='')}"
        )

    @property
    def requests(self) -> list[RequestRecord]:
        """The requests served so far (the last 1000), oldest first."""
        return list(self._log)

    # ---- request handling (called from handler threads) ---------------------

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)

    def _record(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        query: str,
        user: str | None,
        status: int,
        code: int | None,
    ) -> None:
        self._log.append(RequestRecord(method, path, dict(params), query, user, status, code))

    def _authenticate(self, headers: Mapping[str, str], params: Mapping[str, str]) -> str:
        user, password = "default", ""
        authorization = headers.get("Authorization") or ""
        if headers.get("X-ClickHouse-User") is not None:
            user, password = headers["X-ClickHouse-User"], headers.get("X-ClickHouse-Key") or ""
        elif authorization.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(authorization[6:].strip()).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                decoded = ""
            user, _, password = decoded.partition(":")
        elif "user" in params:
            user, password = params["user"], params.get("password", "")
        if self.users is not None and self.users.get(user) != password:
            raise ClickHouseError.make(
                516,
                "AUTHENTICATION_FAILED",
                f"{user}: Authentication failed: password is incorrect, "
                "or there is no user with such name",
            )
        return user

    def _execute(
        self,
        method: str,
        params: Mapping[str, str],
        body: bytes,
        headers: Mapping[str, str],
        *,
        user: str = "default",
    ) -> _Outcome:
        engine = self._engine
        if engine is None:
            raise ClickHouseError.make(210, "NETWORK_ERROR", "Server is shutting down")
        if params.get("compress") in ("1", "true") or params.get("decompress") in ("1", "true"):
            raise ClickHouseError.make(
                48, "NOT_IMPLEMENTED", "ClickHouse block compression (compress/decompress=1)"
            )
        query = params.get("query", "")
        raw = (query.encode() + b"\n" + body) if query and body else (query.encode() or body)
        if not raw.strip():
            raise ClickHouseError.make(62, "SYNTAX_ERROR", "Empty query")
        database = (
            params.get("database") or headers.get("X-ClickHouse-Database") or self.default_database
        )
        settings = {
            name: value
            for name, value in params.items()
            if name not in _TRANSPORT_PARAMS
            and name not in _HTTP_ONLY_SETTINGS
            and not name.startswith("param_")
        }
        bound = {name[6:]: value for name, value in params.items() if name.startswith("param_")}
        readonly = method == "GET" or params.get("readonly", "0") not in ("", "0")
        timezone = settings.get("session_timezone") or self.timezone

        insert = _split_data_insert(raw)
        if insert is not None:
            if user in self.select_only:
                raise self._denied_error(user, "INSERT", insert[0].split()[0])
            if readonly:
                raise self._readonly_error(method)
            target, fmt, data = insert
            return self._insert(engine, target, fmt, data, bound, settings, database, timezone)

        try:
            sql = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ClickHouseError.make(62, "SYNTAX_ERROR", "The query is not valid UTF-8") from None
        keyword = _first_keyword(sql)
        if user in self.select_only and keyword not in _READONLY_KEYWORDS:
            found = _DDL_TARGET_RE.match(sql)
            if found:
                kind, name = found.group("kind").upper(), found.group("name").strip("`")
                target = f"{name}.*" if kind == "DATABASE" else name
                raise self._denied_error(user, f"{keyword} {kind}", target)
            raise self._denied_error(user, keyword, f"{database}.*")
        if readonly and keyword not in _READONLY_KEYWORDS:
            raise self._readonly_error(method)
        trailing = _TRAILING_FORMAT_RE.search(sql)
        fmt = (
            trailing.group(1)
            if trailing
            else params.get("default_format")
            or headers.get("X-ClickHouse-Format")
            or "TabSeparated"
        )
        if fmt.lower() in _CHDB_SPECIAL_FORMATS:
            raise ClickHouseError.make(73, "UNKNOWN_FORMAT", f"Unknown format {fmt}")
        started = time.perf_counter_ns()
        result = engine.run(sql, fmt, params=bound, settings=settings, database=database)
        elapsed = time.perf_counter_ns() - started
        produces_result = keyword in _RESULT_KEYWORDS or (
            trailing is not None and keyword != "INSERT"
        )
        return _Outcome(
            body=bytes(result.bytes() or b""),
            fmt=fmt if produces_result else None,
            summary=self._summary(result, elapsed),
            timezone=timezone,
        )

    def _insert(
        self,
        engine: _Engine,
        target: str,
        fmt: str,
        data: bytes,
        bound: Mapping[str, str],
        settings: Mapping[str, str],
        database: str,
        timezone: str,
    ) -> _Outcome:
        assert self._tmpdir is not None
        head, *rest = _SETTINGS_SPLIT_RE.split(target, maxsplit=1)
        clause = f" SETTINGS {rest[0]}" if rest else ""
        with self._conn_lock:
            self._insert_seq += 1
            path = os.path.join(self._tmpdir, f"insert-{self._insert_seq}.{fmt.lower()}")
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            started = time.perf_counter_ns()
            sql = f"INSERT INTO {head} FROM INFILE {_quote_sql_string(path)}{clause} FORMAT {fmt}"
            result = engine.run(
                sql, "TabSeparated", params=bound, settings=settings, database=database
            )
            elapsed = time.perf_counter_ns() - started
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return _Outcome(
            body=b"", fmt=None, summary=self._summary(result, elapsed), timezone=timezone
        )

    def _compresses(self, params: Mapping[str, str]) -> bool:
        """Whether `enable_http_compression` is on: the request's value, else the engine's."""
        return params.get("enable_http_compression", self._compression_default) in ("1", "true")

    @staticmethod
    def _readonly_error(method: str) -> ClickHouseError:
        detail = "Cannot execute query in readonly mode"
        if method == "GET":
            detail += (
                ". For queries over HTTP, method GET implies readonly. "
                "You should use method POST for modifying queries"
            )
        return ClickHouseError.make(164, "READONLY", detail)

    @staticmethod
    def _denied_error(user: str, keyword: str, target: str) -> ClickHouseError:
        """What ClickHouse answers a user who lacks the grant a statement needs."""
        return ClickHouseError.make(
            497,
            "ACCESS_DENIED",
            f"{user}: Not enough privileges. To execute this query, it's necessary to have"
            f" the grant {keyword} ON {target}",
        )

    @staticmethod
    def _summary(result: Any, elapsed_ns: int) -> dict[str, str]:
        """chdb's statistics under the keys of ClickHouse's X-ClickHouse-Summary."""

        def stat(name: str) -> int:
            try:
                return int(getattr(result, name)())
            except Exception:
                return 0

        return {
            "read_rows": str(stat("storage_rows_read")),
            "read_bytes": str(stat("storage_bytes_read")),
            "written_rows": str(stat("rows_written")),
            "written_bytes": str(stat("bytes_written")),
            "total_rows_to_read": str(stat("storage_rows_read")),
            "result_rows": str(stat("rows_read")),
            "result_bytes": str(stat("bytes_read")),
            "elapsed_ns": str(elapsed_ns),
        }


@contextlib.contextmanager
def serve(client: Any, **kwargs: Any) -> Iterator[ClickHouseHTTPServer]:
    """`with serve(embedded_client) as server:` a started server, stopped on exit."""
    server = ClickHouseHTTPServer(client, **kwargs)
    with server:
        yield server
