"""OTLP/HTTP: `POST /v1/logs` and `/v1/traces` on waitress, answered as the specification says.

The WSGI application checks the path, token, content type and encoding,
applies `max_body` to the decoded body and while decompressing, and hands
the body to the receiver (watchdog.daemon.ingest.receiver); `HttpServer`
runs waitress with its bounds, one of them ours: a request not received
whole within `MAX_REQUEST` of its first byte has its connection closed
(`_Channel`, `_Server`), so a client trickling a byte at a time holds no
connection for long; a client that stops sending mid-body (closing its sending side) is answered
400 (`_Channel.handle_read`), where waitress would close unanswered. The answers: docs/start-without-clickhouse.md#answers-limits-and-backpressure;
why waitress: docs/architecture.md#one-store-one-process-at-a-time-the-receiver.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.receiver import ChunkedReceiver, FixedStreamReceiver
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher, WSGITask
from waitress.trigger import trigger

from watchdog.core.errors import UsageError
from watchdog.core.settings.ingest import parse_listen
from watchdog.daemon.ingest.otlp import JSON, LOGS, PROTOBUF, SIGNALS, Signal, response
from watchdog.daemon.ingest.receiver import Receiver, Refused

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
CUT = "memory_watchdog.cut"  # in the WSGI environ: True when the client stopped mid-body
REFUSED = "memory_watchdog.refused"  # in the WSGI environ: the refusal its headers earned
SCREENED = "memory_watchdog.screened"  # in the WSGI environ: True once its headers were judged

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


# How a header is read: by waitress's parser name (`AUTHORIZATION`, `CONTENT_TYPE`, ...).
Header = Callable[[str], str | None]


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


# The headers of a request -> the refusal they earn (None: read its body).
Screen = Callable[[str, str, Header], Refused | None]


class _Dropped:
    """Where a refused request's body goes as it arrives: nowhere (its length only is kept)."""

    def __init__(self) -> None:
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def append(self, data: bytes) -> None:
        self.length += len(data)

    def getfile(self) -> BinaryIO:
        return io.BytesIO()

    def close(self) -> None:
        return


class _Request(HTTPRequestParser):  # type: ignore[misc]
    """waitress's request, which may be cut (its client closed its sending side mid-body) or
    refused on its headers: then its body is read and dropped, never kept, and no `100
    Continue` is sent (a client waiting for one gets the refusal and the connection closes)."""

    cut = False
    refused: Refused | None = None
    expect_continue: bool  # waitress's
    body_rcv: Any  # waitress's: what receives the body, None without one

    def __init__(self, adj: Adjustments, screen: Screen | None = None) -> None:
        super().__init__(adj)
        self.screen = screen

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if self.screen is None:
            return
        self.refused = self.screen(self.command, self.path, self.headers.get)
        if self.refused is None:
            return
        if self.expect_continue or self.body_rcv is None:  # no body comes before an answer
            self.expect_continue = False
            self.body_rcv = None  # complete now: answered at once
            if self.content_length or self.chunked:
                self.headers["CONNECTION"] = "close"  # its body may still come: not read
        elif self.chunked:
            self.body_rcv = ChunkedReceiver(_Dropped())
        else:
            self.body_rcv = FixedStreamReceiver(self.content_length, _Dropped())


class _Task(WSGITask):  # type: ignore[misc]
    """waitress's task, telling the application that a request is cut (`CUT` in the environ)
    or was refused on its headers (`REFUSED`)."""

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        environ[CUT] = self.request.cut
        environ[REFUSED] = getattr(self.request, "refused", None)
        environ[SCREENED] = getattr(self.request, "screen", None) is not None
        return environ


class _Channel(HTTPChannel):  # type: ignore[misc]
    """waitress's connection, noting when the request it is reading came (its first byte), and
    answering a request whose body its client stopped sending.

    `received` and `handle_read` run in the server's loop thread only, as does
    `_Server.maintenance`.
    """

    task_class = _Task
    request: _Request | None = None  # the request being read (waitress's), None between
    began: float | None = None  # time.monotonic() of the request in progress; None between

    def idle(self) -> bool:
        """No request begun, none being served, nothing to write: closing it loses nothing."""
        return (
            self.began is None
            and self.request is None
            and not self.requests
            and not self.total_outbufs_len
            and not self.will_close
            and not self.close_when_flushed
        )

    def parser_class(self, adj: Adjustments) -> _Request:
        """A request judged on its headers by the server's screen (waitress calls it so)."""
        return _Request(adj, self.server.screen)

    def received(self, data: bytes) -> bool:
        reading = self.request  # the parser of the request in progress, None between requests
        taken = bool(super().received(data))
        if self.request is None:  # every request begun is whole: keep-alive waits are idle time
            self.began = None
        elif self.request is not reading:  # a request began in this read
            self.began = time.monotonic()
        return taken

    def handle_read(self) -> None:
        """waitress's, but the end of input mid-body hands the request to the application cut,
        to be answered 400 (then the connection is closed) rather than closed unanswered."""
        request = self.request
        if request is None or not request.headers_finished or request.completed:
            super().handle_read()  # between requests or mid-head: waitress closes on EOF
            return
        try:
            data = self.socket.recv(self.adj.recv_bytes)  # b"": the client stopped sending
        except BlockingIOError:  # nothing to read after all
            return
        except OSError:  # a reset: no one is left to answer
            self.handle_close()
            return
        if data:
            self.last_activity = time.time()
            self.received(data)
            return
        with self.requests_lock:
            # The body so far is never read; one answer, then the connection is closed.
            request.cut = request.completed = True
            request.headers["CONNECTION"] = "close"
            self.request = None
            self.began = None
            self.requests.append(request)
            if len(self.requests) == 1:  # as waitress: else the task serving them takes it next
                self.server.add_task(self)


class _Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server whose sweep also closes a connection whose request is overdue, and
    which, every slot taken, closes the connection idle the longest for a new one."""

    channel_class = _Channel
    next_channel_cleanup: float  # waitress's: when its sweep runs next

    def __init__(self, *args: Any, max_request: float, screen: Screen, **kwargs: Any) -> None:
        self.max_request = max_request
        self.screen = screen
        self.reused = 0  # idle connections closed for new ones
        self._said = 0.0
        super().__init__(*args, **kwargs)

    def readable(self) -> bool:
        """waitress's, but with every slot taken it still accepts while an idle connection
        can make room (`handle_accept` closes it; closing here, while the loop registers
        its sockets, could hand a closed socket's number and its event to the new one)."""
        if self.accepting and len(self._map) >= self.adj.connection_limit:
            now = time.time()
            if now >= self.next_channel_cleanup:
                self.next_channel_cleanup = now + self.adj.cleanup_interval
                self.maintenance(now)
            return self._idlest() is not None
        return bool(super().readable())

    def handle_accept(self) -> None:
        super().handle_accept()
        if len(self._map) > self.adj.connection_limit:
            self._make_room()

    def _idlest(self) -> _Channel | None:
        idle = [c for c in list(self._map.values()) if isinstance(c, _Channel) and c.idle()]
        return min(idle, key=lambda channel: channel.last_activity) if idle else None

    def _make_room(self) -> None:
        """Every slot taken: close the connection idle the longest (no request begun on it,
        nothing to write), as nginx reuses its idle keep-alive connections when its
        worker_connections run out, so the new one has a slot; one sending is never closed."""
        oldest = self._idlest()
        if oldest is None:
            return  # every slot is working (the new one too): it is served with the rest
        oldest.handle_close()
        self.reused += 1
        now = time.monotonic()
        if now - self._said >= 60:
            self._said = now
            log.warning(
                "otlp: all %d connections were taken; closing the idlest idle ones for new"
                " connections (%d so far)",
                self.adj.connection_limit,
                self.reused,
            )

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # the idle ones
        cutoff = time.monotonic() - self.max_request
        for channel in self.active_channels.values():
            # With a request being served the client is waiting on us; the sweep after judges.
            if channel.began is not None and channel.began < cutoff and not channel.requests:
                if not channel.will_close:
                    log.debug(
                        "otlp %s: closed: request not received whole within %gs",
                        channel.addr[0] if channel.addr else "?",
                        self.max_request,
                    )
                channel.will_close = True  # the loop closes it (`HTTPChannel.handle_write`)


class HttpServer:
    """waitress serving the receiver on `listen`, in a thread of its own; `close()` stops it."""

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
        self._map: dict[int, Any] = {}
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "queue depth" per burst
        try:
            adjustments = Adjustments(
                host=host,
                port=port,
                threads=WORKERS,
                connection_limit=MAX_CONNECTIONS,
                channel_timeout=idle_timeout,
                cleanup_interval=SWEEP_EVERY,
                max_request_body_size=receiver.settings.max_body * 17 // 16 + 64 * 1024,
                asyncore_use_poll=True,
                ident="memory-watchdog-otlp",
                clear_untrusted_proxy_headers=False,
            )
        except ValueError:  # the host resolves to no address
            raise UsageError(f"{flag}: cannot listen on {host}:{port}: no such address") from None
        # What waitress.create_server does for TCP, with our server: one per address the host
        # resolves to (localhost may be two), sharing the map (one loop) and the workers.
        workers = ThreadedTaskDispatcher()
        workers.set_thread_count(WORKERS)
        app = make_app(receiver)

        def judged(method: str, path: str, header: Header) -> Refused | None:
            return screen(receiver, method, path, header)[1]

        try:
            servers = [
                _Server(
                    app,
                    self._map,
                    dispatcher=workers,
                    adj=adjustments,
                    sockinfo=sockinfo,
                    max_request=max_request,
                    screen=judged,
                )
                for sockinfo in adjustments.listen
            ]
        except OSError as exc:
            workers.shutdown(timeout=1)
            wasyncore.close_all(self._map)
            raise UsageError(f"{flag}: cannot listen on {host}:{port}: {exc.strerror}") from None
        self._server = servers[0]  # its loop serves every server in the map
        self.address: tuple[str, int] = (
            str(self._server.effective_host),
            int(self._server.effective_port),
        )
        self._thread = threading.Thread(target=self._run, name="watchdog-otlp-http", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._server.run()
        except Exception:  # the loop must never take the daemon down; the receiver says it
            log.exception("otlp: the HTTP server stopped unexpectedly")

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, let the requests in progress finish (bounded), close every connection."""
        self._server.task_dispatcher.shutdown(cancel_pending=False, timeout=timeout)
        pull = next((d for d in list(self._map.values()) if isinstance(d, trigger)), None)
        try:
            if pull is None:  # the loop can no longer be woken: the server closed itself
                raise OSError
            pull.pull_trigger(lambda: wasyncore.close_all(self._map))
        except OSError:  # the trigger was closed meanwhile (EBADF): close from here
            log.debug("otlp: the HTTP server's trigger was closed; closing its sockets directly")
            wasyncore.close_all(self._map)
        self._thread.join(timeout)
