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
import json
import os
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import chdb

from tests.faults.chprotocol import (
    _CHDB_SPECIAL_FORMATS,
    _DDL_TARGET_RE,
    _HTTP_ONLY_SETTINGS,
    _READONLY_KEYWORDS,
    _RESULT_KEYWORDS,
    _SETTING_NAME_RE,
    _SETTINGS_SPLIT_RE,
    _TRAILING_FORMAT_RE,
    _TRANSPORT_PARAMS,
    HOST,
    ClickHouseError,
    RequestRecord,
    _compress_response,
    _connection_string_of,
    _content_type,
    _decompress_request,
    _first_keyword,
    _Outcome,
    _parse_multipart,
    _quote_setting_value,
    _quote_sql_string,
    _split_data_insert,
)


class _Engine:
    """A dedicated chdb connection handle on the caller's engine, one call at a time."""

    def __init__(self, connection_string: str) -> None:
        self._conn: Any = chdb.connect(connection_string)
        self._lock = threading.Lock()
        self._applied: dict[str, str] = {}

    def run(
        self,
        sql: str,
        fmt: str,
        *,
        params: Mapping[str, str],
        settings: Mapping[str, str],
        database: str,
    ) -> Any:
        """Run one statement in `database` with `settings`, returning chdb's result."""
        with self._lock:
            if self._conn is None:
                raise ClickHouseError.make(210, "NETWORK_ERROR", "Server is shutting down")
            self._call(f"USE `{database.replace('`', '``')}`", "TabSeparated", {})
            self._apply(settings)
            return self._call(sql, fmt, dict(params))

    def _apply(self, settings: Mapping[str, str]) -> None:
        for name in [name for name in self._applied if name not in settings]:
            del self._applied[name]
            self._call(f"SET {name} = DEFAULT", "TabSeparated", {})
        for name, value in settings.items():
            if self._applied.get(name) == value:
                continue
            if not _SETTING_NAME_RE.match(name):
                raise ClickHouseError.make(115, "UNKNOWN_SETTING", f"Unknown setting '{name}'")
            self._applied.pop(name, None)
            self._call(f"SET {name} = {_quote_setting_value(value)}", "TabSeparated", {})
            self._applied[name] = value

    def _call(self, sql: str, fmt: str, params: dict[str, str]) -> Any:
        try:
            return self._conn.query(sql, fmt, params=params)
        except Exception as exc:
            raise ClickHouseError.from_engine(exc) from None

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    harness: ClickHouseHTTPServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore connections the client (or a fault proxy) dropped; report anything else."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection's thread ends after this
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.harness._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.harness._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        return  # the harness keeps its own request log

    def version_string(self) -> str:
        return self.server.harness.display_name

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("request body ended early")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self) -> None:
        harness = self.server.harness
        parts = urlsplit(self.path)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        query_id = params.get("query_id") or str(uuid.uuid4())
        user: str | None = None
        sql_text = params.get("query", "")
        try:
            body = self._read_body()
        except (ConnectionError, ValueError, OSError):
            self.close_connection = True
            return
        try:
            if parts.path in ("/ping", "/replicas_status") or (
                parts.path == "/" and self.command == "GET" and not sql_text and not body
            ):
                self._send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
                harness._record(self.command, parts.path, params, "", None, 200, None)
                return
            if parts.path != "/":
                message = f"There is no handle {parts.path}\n\nUse / or /ping for health checks.\n"
                self._send(404, message.encode(), {"Content-Type": "text/plain; charset=UTF-8"})
                harness._record(self.command, parts.path, params, "", None, 404, None)
                return
            user = harness._authenticate(self.headers, params)
            body = _decompress_request(body, self.headers.get("Content-Encoding"))
            content_type = self.headers.get("Content-Type", "")
            if content_type.lower().startswith("multipart/form-data"):
                fields, files = _parse_multipart(content_type, body)
                if files:
                    raise ClickHouseError.make(
                        48, "NOT_IMPLEMENTED", "External data is not supported by the test server"
                    )
                params.update(fields)
                body = b""
            # A query sent as the body is recorded whole (an insert's data: its first 64 KiB).
            sql_text = params.get("query", "") or body[:65536].decode("utf-8", "replace")
            outcome = harness._execute(self.command, params, body, self.headers, user=user)
        except ClickHouseError as err:
            headers = {
                "Content-Type": "text/plain; charset=UTF-8",
                "X-ClickHouse-Exception-Code": str(err.code),
                "X-ClickHouse-Query-Id": query_id,
                "X-ClickHouse-Server-Display-Name": harness.display_name,
            }
            self._send(err.status, err.body(harness.version), headers)
            harness._record(self.command, parts.path, params, sql_text, user, err.status, err.code)
            return
        except Exception as exc:  # a harness bug: still answer like a server would
            err = ClickHouseError.make(1001, "STD_EXCEPTION", f"{type(exc).__name__}: {exc}")
            self._send(500, err.body(harness.version), {"X-ClickHouse-Exception-Code": "1001"})
            harness._record(self.command, parts.path, params, sql_text, user, 500, 1001)
            return
        headers = {
            "Content-Type": _content_type(outcome.fmt),
            "X-ClickHouse-Server-Display-Name": harness.display_name,
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Timezone": outcome.timezone,
            "X-ClickHouse-Summary": json.dumps(outcome.summary, separators=(",", ":")),
        }
        if outcome.fmt is not None:
            headers["X-ClickHouse-Format"] = outcome.fmt
        body_out = outcome.body
        if harness._compresses(params) and body_out:
            body_out, encoding = _compress_response(
                body_out, self.headers.get("Accept-Encoding", "")
            )
            if encoding:
                headers["Content-Encoding"] = encoding
        self._send(200, body_out, headers)
        harness._record(self.command, parts.path, params, sql_text, user, 200, None)

    def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Keep-Alive", "timeout=10")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True


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
