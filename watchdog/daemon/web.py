"""The daemon's small HTTP server (`daemon --http`): the pages, `/healthz`, `/status`, `/metrics`.

`make_handler` routes GET and HEAD (a window end that is no time is a 400,
a client gone costs one debug line); `BoundedHTTPServer` is the standard
library's server bounded: idle connections in one selector with no thread,
a fixed pool of workers, a stuck connection cut. The routes and what
`/healthz` answers: docs/operations.md#the-daemons-pages-and-healthz.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from markupsafe import escape

from watchdog.core import jsontext
from watchdog.core.errors import UsageError
from watchdog.core.links import ARCHIVE, STAMP, parse_stamp
from watchdog.core.times import CLOCK_SKEW, rfc3339
from watchdog.daemon.ingest.state import SpoolState
from watchdog.report.files import LATEST

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
# The pages are self-contained: nothing may be fetched, no script may run.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

StatusDocument = Callable[[], Mapping[str, Any]]
LastRunAge = Callable[[], timedelta | None]
# (when the run was due, how late it is, what a run may take) when a run is overdue, else None.
Overdue = Callable[[], tuple[datetime, timedelta, timedelta] | None]
# The Accept header -> the metrics' body and content type.
MetricsExposition = Callable[[str | None], tuple[bytes, str]]
# The OTLP receiver's spool now.
ReceiverState = Callable[[], SpoolState]

WORKERS = 4  # threads serving connections: a scrape, a health check and a person at once
QUEUE = 16  # requests waiting for a worker; more are closed at once
MAX_IDLE = 256  # connections waiting for their request (no thread each); beyond, the oldest goes
IO_TIMEOUT = 10.0  # seconds a connection may wait for its request, and any read or write
MAX_CONNECTION = 30.0  # seconds a worker may spend on one connection


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:8787`, `:8787` or `8787` (loopback), `[::1]:8787`; port 0 picks a free one."""
    host, _, port = text.strip().rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--http: {text!r} is not HOST:PORT (e.g. 127.0.0.1:8787)")
    return host, int(port)


def health(
    age: timedelta | None,
    period: timedelta,
    receiver: SpoolState | None = None,
    overdue: tuple[datetime, timedelta, timedelta] | None = None,
) -> tuple[int, dict[str, Any]]:
    """200 when the last run is younger than two periods, no run is overdue (due, and not
    finished within what a run may take), and the receiver's spool, when there is one, can
    keep what it is sent; else 503; and the JSON body."""
    code, body = _run_health(age, period)
    if code == 200 and overdue is not None:
        due, late, allowed = overdue
        code = 503
        body.update(
            status="overdue",
            overdue_s=round(late.total_seconds(), 3),
            problem=f"the run due at {rfc3339(due)} has not finished {late.total_seconds():.0f}s"
            f" later (a run may take {allowed.total_seconds():.0f}s)",
        )
    if receiver is not None:
        body["ingest"] = receiver.to_json()
        if code == 200 and receiver.problem:
            code = 503
            body.update(status="spool", problem=f"the OTLP receiver: {receiver.problem}")
    return code, body


def _run_health(age: timedelta | None, period: timedelta) -> tuple[int, dict[str, Any]]:
    limit = 2 * period
    body: dict[str, Any] = {
        "last_run_age_s": None if age is None else round(age.total_seconds(), 3),
        "max_age_s": limit.total_seconds(),
    }
    if age is None:
        return 503, {"status": "no_run", **body, "problem": "no run recorded yet"}
    if age < -CLOCK_SKEW:
        return 503, {
            "status": "clock",
            **body,
            "problem": "the last run ends in the future: this host's clock is behind",
        }
    if age >= limit:
        return 503, {"status": "stale", **body, "problem": "the last run is older than 2 periods"}
    return 200, {"status": "ok", **body}


def _index(directory: Path) -> str:
    """A plain list of the archived pages, newest first, with relative links."""
    pages = sorted(
        (p.stem for p in (directory / ARCHIVE).glob("*.html") if STAMP.match(p.stem)),
        reverse=True,
    )
    items = "".join(f'<li><a href="/{ARCHIVE}/{escape(s)}">{escape(s)}</a></li>' for s in pages)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>memory-watchdog reports</title></head>"
        '<body style="font-family: system-ui, sans-serif; margin: 20px">'
        f'<h1>Reports</h1><p><a href="/">latest</a></p><ol>{items}</ol></body></html>'
    )


def make_handler(
    report_dir: Path,
    *,
    status: StatusDocument,
    last_run_age: LastRunAge,
    period: timedelta,
    metrics: MetricsExposition | None = None,
    receiver: ReceiverState | None = None,
    overdue: Overdue | None = None,
) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving `report_dir` and the daemon's health and status."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "memory-watchdog"
        sys_version = ""
        timeout = IO_TIMEOUT  # StreamRequestHandler sets it on the socket

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, *, head: bool) -> None:
            try:
                self._route(head=head)
            except OSError:
                raise  # the client went away or stalled: the server logs one line
            except Exception as exc:  # a bug of ours: one line, a 500, the server goes on
                log.warning("http %s: %s: %s", self.path[:200], type(exc).__name__, exc)
                self._text(500, "internal error", head)

        def _route(self, *, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            if path in ("/", "/index.html"):
                self._file(report_dir / LATEST, head, missing="no report written yet")
            elif path in (f"/{ARCHIVE}", f"/{ARCHIVE}/"):
                self._send(200, "text/html; charset=utf-8", _index(report_dir).encode(), head)
            elif path.startswith(f"/{ARCHIVE}/"):
                name = parse_stamp(path[len(ARCHIVE) + 2 :])
                if name is None:
                    self._text(400, "not a window end (e.g. 20261128T040000Z)", head)
                else:
                    self._file(
                        report_dir / ARCHIVE / f"{name}.html", head, missing="no such report"
                    )
            elif path == "/healthz":
                code, body = health(
                    self._safe(last_run_age),
                    period,
                    receiver() if receiver else None,
                    overdue() if overdue else None,
                )
                self._json(code, body, head)
            elif path == "/status":
                try:
                    document = dict(status())
                except Exception as exc:  # the store may be down: say so, do not crash
                    log.warning("/status: %s", exc)
                    self._json(503, {"error": str(exc).splitlines()[0] if str(exc) else "?"}, head)
                    return
                self._json(200, document, head)
            elif path == "/metrics" and metrics is not None:
                exposed, content_type = metrics(self.headers.get("Accept"))
                self._send(200, content_type, exposed, head)
            else:
                self._text(404, "not found (try /, /reports/, /healthz, /status, /metrics)", head)

        @staticmethod
        def _safe(age: LastRunAge) -> timedelta | None:
            try:
                return age()
            except Exception as exc:
                log.warning("/healthz: last run age unknown: %s", exc)
                return None

        def _file(self, path: Path, head: bool, *, missing: str) -> None:
            try:
                body = path.read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                self._text(404, missing, head)
                return
            self._send(200, "text/html; charset=utf-8", body, head)

        def _json(self, code: int, body: Mapping[str, Any], head: bool) -> None:
            text = jsontext.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n"
            self._send(code, "application/json", text.encode(), head)

        def _text(self, code: int, text: str, head: bool) -> None:
            self._send(code, "text/plain; charset=utf-8", (text + "\n").encode(), head)

        def _send(self, code: int, content_type: str, body: bytes, head: bool) -> None:
            self.send_response(code, HTTPStatus(code).phrase)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            if not head:
                self.wfile.write(body)

        answered: list[str]  # the request line and status, once answered

        def handle(self) -> None:
            self.answered = []
            super().handle()  # a client gone or stalled raises: the server logs that line
            for line in self.answered:  # one debug line per request, once it is answered
                log.debug("http %s %s", self.address_string(), line)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            self.answered = [f'"{self.requestline[:200]}" {code}']

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s " + format, self.address_string(), *args)

    return Handler


class BoundedHTTPServer(HTTPServer):
    """An HTTPServer with a fixed pool of worker threads, and no thread for an idle connection.

    The standard library's ThreadingHTTPServer starts a thread per connection
    and waits forever on an idle one: 2,000 idle connections made 2,003
    threads. Here a new connection waits in a selector, costing no thread,
    until its request arrives (at most `IO_TIMEOUT`; beyond `max_idle` such
    connections the oldest is closed); then one of `workers` threads serves
    it, taking it from a queue of `waiting` (full: the connection is closed).
    A connection a worker has held for longer than `max_connection` (a client
    trickling its request) is cut. All of this runs in `serve_forever`'s
    thread (`service_actions`), so the selector needs no lock.
    """

    request_queue_size = 128  # the listen backlog (socketserver's 5 makes a burst wait seconds)

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        workers: int = WORKERS,
        waiting: int = QUEUE,
        max_idle: int = MAX_IDLE,
        max_connection: float = MAX_CONNECTION,
    ) -> None:
        super().__init__(address, handler)
        self.max_idle = max_idle
        self.max_connection = max_connection
        self._selector = selectors.DefaultSelector()
        self._idle: dict[socket.socket, tuple[Any, float]] = {}  # oldest first
        self._queue: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(waiting)
        self._busy: dict[socket.socket, float] = {}  # connection -> when a worker took it
        self._lock = threading.Lock()
        self.refused = 0  # connections closed because every worker was busy
        self._refused_said = 0.0
        self._workers = [
            threading.Thread(target=self._work, name=f"watchdog-http-{i}", daemon=True)
            for i in range(workers)
        ]
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Park the new connection until its request arrives (serve_forever's thread)."""
        if len(self._idle) >= self.max_idle:
            self._drop(next(iter(self._idle)), "closed: too many idle connections")
        self._idle[request] = (client_address, time.monotonic())
        self._selector.register(request, selectors.EVENT_READ)

    def service_actions(self) -> None:
        """Hand the connections whose request arrived to the workers; close the idle, cut the stuck."""
        now = time.monotonic()
        if self._idle:
            for key, _ in self._selector.select(timeout=0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                client_address, _ = self._idle.pop(sock)
                self._selector.unregister(sock)
                self._dispatch(sock, client_address)
            for sock, (_, since) in list(self._idle.items()):
                if now - since > IO_TIMEOUT:
                    self._drop(sock, "closed: no request within the timeout")
        cutoff = now - self.max_connection
        with self._lock:
            overdue = [sock for sock, since in self._busy.items() if since < cutoff]
        for sock in overdue:
            with contextlib.suppress(OSError):  # the worker's blocked read or write returns
                sock.shutdown(socket.SHUT_RDWR)

    def _drop(self, sock: socket.socket, why: str) -> None:
        client_address, _ = self._idle.pop(sock)
        self._selector.unregister(sock)
        log.debug("http %s: %s", _host(client_address), why)
        self.shutdown_request(sock)

    def _dispatch(self, sock: socket.socket, client_address: Any) -> None:
        try:
            self._queue.put_nowait((sock, client_address))
        except queue.Full:
            self.refused += 1
            now = time.monotonic()
            if now - self._refused_said >= 60:  # a flood is one line a minute, not one a client
                self._refused_said = now
                log.warning(
                    "http: every worker is busy; closing new requests (%d so far)", self.refused
                )
            self.shutdown_request(sock)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, client_address = item
            with self._lock:
                self._busy[request] = time.monotonic()
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                with self._lock:
                    self._busy.pop(request, None)
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One debug line per client that disconnected, stalled or failed; never a traceback."""
        log.debug("http %s: %s", _host(client_address), _one_line(sys.exc_info()[1]))

    def server_close(self) -> None:
        super().server_close()
        for sock in list(self._idle):
            self._drop(sock, "closed: the server stops")
        self._selector.close()
        for _ in self._workers:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break  # daemon threads: they end with the process


class _ServerV6(BoundedHTTPServer):
    address_family = socket.AF_INET6


def _host(client_address: Any) -> str:
    return str(client_address[0]) if client_address else "?"


def _one_line(error: BaseException | None) -> str:
    if error is None:
        return "connection failed"
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def serve(
    listen: str, handler: type[BaseHTTPRequestHandler]
) -> tuple[BoundedHTTPServer, threading.Thread]:
    """Bind `listen` (HOST:PORT, loopback by default) and serve in a daemon thread.

    Stop it with `server.shutdown()` then `server.server_close()`.
    """
    host, port = parse_listen(listen)
    server_class = _ServerV6 if ":" in host else BoundedHTTPServer
    try:
        server = server_class((host, port), handler)
    except OSError as exc:
        raise UsageError(f"--http: cannot listen on {host}:{port}: {exc.strerror}") from None
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="watchdog-http",
        daemon=True,
    )
    thread.start()
    return server, thread
