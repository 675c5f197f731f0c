"""The request side of tests/faults/chserver.py: the engine handle queries run on, and the
HTTP handler that answers one request as ClickHouse would (the harness it serves holds the
settings: users, faults, the record of requests)."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import chdb

if TYPE_CHECKING:
    from tests.faults.chserver import ClickHouseHTTPServer

from tests.faults.chprotocol import (
    _SETTING_NAME_RE,
    ClickHouseError,
    _compress_response,
    _content_type,
    _decompress_request,
    _parse_multipart,
    _quote_setting_value,
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
