"""OTLP/HTTP: `POST /v1/logs` and `/v1/traces` on waitress, answered as the specification says.

The WSGI application judges the headers (`screen`: the token first, the path,
content type and encoding, the length, the admission), applies `max_body` to
the decoded body and while decompressing, and hands the body to the receiver
(watchdog.daemon.ingest.receiver); `HttpServer` runs waitress with its bounds
and ours (watchdog.daemon.waitress_bounds.BoundedServer: the same screen as headers
end, so a refused body is never kept; slow requests cut; the idlest idle
connection closed for a new one when every slot is taken). The answers:
docs/start-without-clickhouse.md#answers-limits-and-backpressure; why waitress:
docs/architecture.md#one-store-one-process-at-a-time-the-receiver.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2

from watchdog.core.errors import UsageError
from watchdog.core.settings.ingest import parse_listen
from watchdog.daemon.ingest.otlp import JSON, LOGS, PROTOBUF, SIGNALS, Signal, response
from watchdog.daemon.ingest.receiver import Receiver, Refused
from watchdog.daemon.waitress_bounds import (
    CUT,
    REFUSED,
    SCREENED,
    BoundedServer,
    Bounds,
    Header,
)

log = logging.getLogger(__name__)

PATHS = {handler.path: signal for signal, handler in SIGNALS.items()}
WORKERS = 4  # threads decoding requests (the DecodeBudget bounds their memory together)
# Beyond, the idlest idle connection is closed for a new one (or it waits in the listen backlog
# while every one is working).
MAX_CONNECTIONS = 256
IDLE_TIMEOUT = 30  # seconds without a byte in either direction: the connection is closed
# Seconds from a request's first byte until it is received whole, body included; slower, its
# connection is closed unanswered. A max_body request (16 MiB) needs 0.6 MB/s to make it; the
# SDK exporters give up on a request after 10 s anyway (OTEL_EXPORTER_OTLP_TIMEOUT).
MAX_REQUEST = 30.0
SWEEP_EVERY = 1  # seconds between the sweeps closing idle and slow connections
READ_SIZE = 64 * 1024

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
GRPC_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    500: code_pb2.INTERNAL,
    503: code_pb2.UNAVAILABLE,
}
_ENCODINGS = {"identity": 0, "none": 0, "gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}
_ENCODINGS["deflate"] = zlib.MAX_WBITS

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def screen(
    receiver: Receiver, method: str, path: str, header: Header
) -> tuple[Signal, Refused | None]:
    """What the headers alone decide, the token first (a stranger learns nothing else): the
    signal, and the refusal when the request is not to be taken (its body then never kept)."""
    signal = PATHS.get(path, LOGS)
    try:
        receiver.check_token(header("AUTHORIZATION"))
        if path not in PATHS:
            raise Refused(404, f"no such path {path[:200]!r} (POST /v1/logs or /v1/traces)")
        if method != "POST":
            raise Refused(405, "use POST")
        content_type = _media_type(header("CONTENT_TYPE"))
        if content_type not in (PROTOBUF, JSON):
            raise Refused(415, f"unsupported content type {content_type!r}")
        encoding = (header("CONTENT_ENCODING") or "identity").strip().lower()
        if encoding not in _ENCODINGS:
            raise Refused(415, f"unsupported content encoding {encoding!r}")
        size = int(header("CONTENT_LENGTH") or 0)  # a chunked body's: once decoded
        max_body = receiver.settings.max_body
        if size > max_body:
            raise Refused(413, f"body of {size} bytes; the limit is {max_body}")
        receiver.admit()
    except Refused as refused:
        return signal, refused
    return signal, None


def make_app(receiver: Receiver) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI application answering OTLP/HTTP requests into `receiver`."""
    max_body = receiver.settings.max_body
    names = {"AUTHORIZATION": "HTTP_AUTHORIZATION", "CONTENT_ENCODING": "HTTP_CONTENT_ENCODING"}

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        content_type = _media_type(environ.get("CONTENT_TYPE"))
        reply_type = JSON if content_type == JSON else PROTOBUF
        try:
            early = environ.get(REFUSED)
            if early is not None:  # refused on its headers: its body was never kept
                raise early
            if environ.get(CUT):
                raise Refused(400, "the body was cut short: the client stopped sending mid-body")
            path = environ.get("PATH_INFO") or ""
            if environ.get(SCREENED) and path in PATHS:  # its headers were judged as it came
                signal = PATHS[path]
                receiver.admit()  # again: the queue may have filled while its body came
            else:
                signal, refused = screen(
                    receiver,
                    environ.get("REQUEST_METHOD") or "",
                    path,
                    lambda name: environ.get(names.get(name, name)),
                )
                if refused is not None:
                    raise refused
            encoding = (environ.get("HTTP_CONTENT_ENCODING") or "identity").strip().lower()
            size = int(environ.get("CONTENT_LENGTH") or 0)  # decoded: waitress sets it
            if size > max_body:
                raise Refused(413, f"body of {size} bytes; the limit is {max_body}")
            body = _read(environ["wsgi.input"], size, _ENCODINGS[encoding], max_body)
            batch = receiver.accept(signal, body, content_type)
        except Refused as refused:
            receiver.counts.refuse(refused.status)
            log.debug("otlp %s: %d %s", environ.get("PATH_INFO", "")[:200], refused.status, refused)
            return _answer(start_response, refused.status, reply_type, refused, environ)
        except Exception as exc:  # a bug of ours: one line and a 500, never a traceback per request
            log.warning(
                "otlp: %s %s: %s: %s",
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
                type(exc).__name__,
                exc,
            )
            failed = Refused(500, "internal error")
            receiver.counts.refuse(500)
            return _answer(start_response, 500, reply_type, failed, environ)
        body = response(signal, batch, reply_type)
        start_response("200 OK", [("Content-Type", reply_type), ("Content-Length", str(len(body)))])
        return [body]

    return app


def _answer(
    start_response: StartResponse,
    status: int,
    reply_type: str,
    refused: Refused,
    environ: dict[str, Any],
) -> Iterable[bytes]:
    body = status_body(status, refused.message, reply_type)
    headers = [("Content-Type", reply_type), ("Content-Length", str(len(body)))]
    if refused.retry_after_s is not None:
        headers.append(("Retry-After", str(refused.retry_after_s)))
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="otlp"'))
    if status == 405:
        headers.append(("Allow", "POST"))
    start_response(f"{status} {_REASONS.get(status, '')}", headers)
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def _read(stream: BinaryIO, size: int, wbits: int, limit: int) -> bytes:
    """The body, decompressed as it is read, never past `limit` bytes (413) nor broken (400)."""
    if not wbits:
        body = stream.read(size)
        if len(body) != size:
            raise Refused(400, "the body ended before its length")
        return body
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    left = size
    try:
        while left > 0:
            piece = stream.read(min(READ_SIZE, left))
            if not piece:
                raise Refused(400, "the body ended before its length")
            left -= len(piece)
            out += inflater.decompress(piece, limit + 1 - len(out))
            if len(out) > limit or inflater.unconsumed_tail:
                raise Refused(413, f"the body decompresses past the limit of {limit} bytes")
    except zlib.error as exc:
        raise Refused(400, f"not a valid compressed body: {exc}") from None
    if not inflater.eof:
        raise Refused(400, "the compressed body is cut short")
    return bytes(out)


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def status_body(status: int, message: str, content_type: str) -> bytes:
    """A google.rpc.Status saying `message`, as the OTLP specification wants error bodies."""
    body = status_pb2.Status(code=GRPC_CODES.get(status, code_pb2.UNKNOWN), message=message)
    if content_type == JSON:
        return str(json_format.MessageToJson(body, indent=None)).encode()
    return bytes(body.SerializeToString())


class HttpServer(BoundedServer):
    """waitress serving the receiver on `listen` (every address its host resolves to), in a
    thread of its own; `close()` stops it."""

    name = "otlp"
    title = "the HTTP server"
    thread_name = "watchdog-otlp-http"
    log = log

    def __init__(
        self,
        receiver: Receiver,
        listen: str,
        *,
        flag: str = "--otlp",
        idle_timeout: int = IDLE_TIMEOUT,
        max_request: float = MAX_REQUEST,
    ) -> None:
        try:
            host, port = parse_listen(listen, flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

        def judged(method: str, path: str, header: Header) -> Refused | None:
            return screen(receiver, method, path, header)[1]

        bounds = Bounds(
            ident="memory-watchdog-otlp",
            # waitress counts wire bytes (chunk framing too): a little above max_body, which the
            # app applies to the decoded body.
            max_body=receiver.settings.max_body * 17 // 16 + 64 * 1024,
            idle_timeout=idle_timeout,
            max_request=max_request,
            workers=WORKERS,
            connections=MAX_CONNECTIONS,
            sweep_every=SWEEP_EVERY,
        )
        super().__init__(host, port, make_app(receiver), bounds, flag=flag, screen=judged)
        self.start()
