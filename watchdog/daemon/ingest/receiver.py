"""The OTLP/HTTP receiver: `POST /v1/logs` and `POST /v1/traces`, answered as the specification says.

- Encodings: binary protobuf (`application/x-protobuf`) and JSON
  (`application/json`); the response has the request's encoding. Bodies may
  be `Content-Encoding: gzip` (or `deflate`).
- 200 once the accepted records are durable (watchdog.daemon.ingest.spool),
  with `partial_success` when some were rejected (why, in its message).
- 400 for a body that is not a request of that signal; 401 without the
  bearer token when one is configured (checked in constant time); 404 for
  another path; 405 for another method; 411 without a Content-Length;
  413 over `max_body` (before or after decompressing) or `max_records`;
  415 for another content type or encoding.
- 429 when more is queued for the store than `max_queued`, 503 while the
  store has been unusable that long, while the daemon stops, or when the
  spool cannot be written: both with `Retry-After`, which the SDKs' exporters
  honour before retrying the same request.

Error bodies are a `google.rpc.Status` in the request's encoding. The server
is the standard library's `ThreadingHTTPServer`; at most `MAX_ACTIVE`
requests are decoded at once, so the memory a burst takes stays bounded.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2

from watchdog.core.errors import UsageError
from watchdog.core.settings.ingest import IngestSettings, parse_listen
from watchdog.daemon.ingest.otlp import (
    JSON,
    LOGS,
    PROTOBUF,
    TRACES,
    BadRequest,
    Batch,
    count_records,
    decode,
    response,
    to_batch,
)
from watchdog.daemon.ingest.spool import IngestSpool

log = logging.getLogger(__name__)

PATHS = {"/v1/logs": LOGS, "/v1/traces": TRACES}
MAX_ACTIVE = 4  # requests decoded at once
RETRY_AFTER_S = 1  # short: the SDK exporters give up once their timeout (10s) would pass

_GRPC_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    411: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


@dataclass(frozen=True)
class Refusal:
    """Why a request is turned away for now (429 or 503), and for how long."""

    status: int
    message: str
    retry_after_s: int = RETRY_AFTER_S


class _Reply(Exception):
    """Answer the request now with this status and message."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


@dataclass
class Counts:
    """What the receiver did, for /metrics and the log (updated under `lock`)."""

    accepted: dict[str, int]
    rejected: dict[str, int]
    retried: dict[str, int]  # requests whose records were already kept: stored once
    refused: dict[int, int]  # requests answered with an error, by status
    lock: threading.Lock

    @classmethod
    def zero(cls) -> Counts:
        signals = {LOGS: 0, TRACES: 0}
        return cls(dict(signals), dict(signals), dict(signals), {}, threading.Lock())

    def refuse(self, status: int) -> None:
        with self.lock:
            self.refused[status] = self.refused.get(status, 0) + 1


class Receiver:
    """Decodes, maps and spools OTLP requests; `admission` says whether to take more now."""

    def __init__(
        self,
        settings: IngestSettings,
        spool: IngestSpool,
        *,
        admission: Callable[[], Refusal | None],
    ) -> None:
        self.settings = settings
        self.spool = spool
        self.admission = admission
        self.counts = Counts.zero()
        self._token = settings.token_value.encode()
        self._active = threading.BoundedSemaphore(MAX_ACTIVE)

    # -- one request --------------------------------------------------------------------

    def handle(
        self, path: str, headers: Any, read: Callable[[int], bytes]
    ) -> tuple[int, bytes, str, dict[str, str]]:
        """Status, body, content type and extra headers for one POST."""
        content_type = _media_type(headers.get("Content-Type"))
        reply_type = JSON if content_type == JSON else PROTOBUF
        try:
            signal, body = self._admit(path, headers, content_type, read)
            batch = self._accept(signal, body, content_type)
        except _Reply as reply:
            self.counts.refuse(reply.status)
            extra = {"Connection": "close"} if reply.close else {}
            if reply.status in (429, 503):
                extra["Retry-After"] = str(RETRY_AFTER_S)
            if reply.status == 401:
                extra["WWW-Authenticate"] = 'Bearer realm="otlp"'
            return (
                reply.status,
                _status_body(reply.status, reply.message, reply_type),
                reply_type,
                extra,
            )
        return 200, response(signal, batch, reply_type), reply_type, {}

    def _admit(
        self, path: str, headers: Any, content_type: str, read: Callable[[int], bytes]
    ) -> tuple[str, bytes]:
        """The signal and the decompressed body, or the _Reply that turns the request away."""
        signal = PATHS.get(path.split("?", 1)[0])
        if signal is None:
            raise _Reply(404, f"no such path {path!r} (POST /v1/logs or /v1/traces)", close=True)
        if self._token and not _bearer_ok(headers.get("Authorization"), self._token):
            raise _Reply(401, "missing or wrong bearer token", close=True)
        if content_type not in (PROTOBUF, JSON):
            raise _Reply(415, f"unsupported content type {content_type!r}", close=True)
        length = headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            raise _Reply(411, "a Content-Length is required", close=True)
        size = int(length)
        if size > self.settings.max_body:
            raise _Reply(
                413, f"body of {size} bytes; the limit is {self.settings.max_body}", close=True
            )
        encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "none", "gzip", "x-gzip", "deflate"):
            raise _Reply(415, f"unsupported content encoding {encoding!r}", close=True)
        raw = read(size)
        if len(raw) != size:
            raise _Reply(400, "the body ended before its Content-Length", close=True)
        # Read before refusing: a client still sending when the connection closes would never
        # see the answer, nor its Retry-After; the connection then stays open for the retry.
        refusal = self.admission()
        if refusal is not None:
            raise _Reply(refusal.status, refusal.message)
        return signal, _decompress(raw, encoding, self.settings.max_body)

    def _accept(self, signal: str, body: bytes, content_type: str) -> Batch:
        """Decode, map and spool; the batch once it is durable."""
        with self._active:
            try:
                request = decode(signal, body, content_type)
            except BadRequest as exc:
                raise _Reply(400, str(exc)[:300]) from None
            records = count_records(signal, request)
            if records > self.settings.max_records:
                raise _Reply(
                    413,
                    f"{records} records in one request; the limit is {self.settings.max_records}",
                )
            batch = to_batch(signal, request)
            del request, body
        fresh = False
        if batch.rows:
            try:
                fresh = self.spool.put(batch)
            except OSError as exc:
                log.error("ingest: cannot write the spool (%s); answering 503", exc.strerror)
                raise _Reply(503, "the receiver cannot keep the records now") from None
        with self.counts.lock:
            self.counts.accepted[signal] += batch.rows if fresh else 0
            self.counts.retried[signal] += 1 if batch.rows and not fresh else 0
            self.counts.rejected[signal] += batch.rejected
        return batch

    # -- serving ------------------------------------------------------------------------

    def serve(self, listen: str) -> ThreadingHTTPServer:
        """Bind `listen` and serve in a daemon thread; stop with shutdown() then server_close()."""
        try:
            host, port = parse_listen(listen, "--otlp")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        server_class = _ServerV6 if ":" in host else ThreadingHTTPServer
        try:
            server = server_class((host, port), _handler(self))
        except OSError as exc:
            raise UsageError(f"--otlp: cannot listen on {host}:{port}: {exc.strerror}") from None
        server.daemon_threads = True
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="watchdog-otlp",
            daemon=True,
        ).start()
        return server


class _ServerV6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the SDK exporters reuse their connection

        def version_string(self) -> str:
            return "memory-watchdog-otlp"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("otlp %s: %s", self.address_string(), format % args)

        def do_POST(self) -> None:
            status, body, content_type, extra = receiver.handle(
                self.path, self.headers, self.rfile.read
            )
            self._send(status, body, content_type, extra)

        def _refuse_method(self) -> None:
            receiver.counts.refuse(405)
            body = _status_body(405, "use POST", PROTOBUF)
            self._send(405, body, PROTOBUF, {"Allow": "POST", "Connection": "close"})

        do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = _refuse_method

        def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            if extra.get("Connection") == "close":
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _bearer_ok(header: str | None, token: bytes) -> bool:
    """Whether `Authorization: Bearer <token>` carries the token (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


def _decompress(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body decompressed, never past `limit` bytes (413) nor from a broken stream (400)."""
    if encoding in ("identity", "none"):
        return raw
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise _Reply(400, f"not a valid {encoding} body: {exc}") from None
    if len(body) > limit or inflater.unconsumed_tail:
        raise _Reply(413, f"the body decompresses past the limit of {limit} bytes")
    if not inflater.eof:
        raise _Reply(400, f"the {encoding} body is cut short")
    return body


def _status_body(status: int, message: str, content_type: str) -> bytes:
    """A google.rpc.Status saying `message`, as the OTLP specification wants error bodies."""
    body = status_pb2.Status(code=_GRPC_CODES.get(status, code_pb2.UNKNOWN), message=message)
    if content_type == JSON:
        return str(json_format.MessageToJson(body, indent=None)).encode()
    return bytes(body.SerializeToString())
