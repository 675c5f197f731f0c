"""waitress, bounded for strangers: requests judged on their headers, slow ones cut, idle ones reused.

`BoundedServer` is both of the daemon's HTTP servers, the pages (watchdog.daemon.web) and
OTLP/HTTP (watchdog.daemon.ingest.otlp_http): waitress within a `Bounds` (workers, connection
slots, the idle timeout, the body, how long a request may take to arrive) in a thread of its
own, stopped within a deadline. These parts are ours: a request may be judged on its headers as
they end (a refused body is read and dropped, never kept, and no `100 Continue` is sent; one
whose body is past the server's limit is answered at once with its refusal, its body never
read), a HEAD is answered with headers alone (never a body, nor a chunked stream's end), one
whose client stops sending mid-body is handed on marked cut (answered 400 by OTLP), one not
received whole within its bound of its first byte has its connection closed, and with every
connection slot taken the idlest idle connection is closed for a new one (as nginx reuses
keep-alive connections) (docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.receiver import ChunkedReceiver, FixedStreamReceiver
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.trigger import trigger
from waitress.utilities import RequestEntityTooLarge

from watchdog.core.errors import UsageError

log = logging.getLogger(__name__)

CUT = "memory_watchdog.cut"  # in the WSGI environ: True when the client stopped mid-body
REFUSED = "memory_watchdog.refused"  # in the WSGI environ: the refusal its headers earned
SCREENED = "memory_watchdog.screened"  # in the WSGI environ: True once its headers were judged

# How a header is read: by waitress's parser name (`AUTHORIZATION`, `CONTENT_TYPE`, ...).
Header = Callable[[str], str | None]


# The headers of a request (method, path, header) -> the refusal they earn (None: read its body).
# The server only hands it to the application, in the environ's `REFUSED`.
Screen = Callable[[str, str, Header], object | None]
# A WSGI application.
App = Callable[[dict[str, Any], Callable[..., Any]], Any]


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
    refused: object | None = None
    expect_continue: bool  # waitress's
    body_rcv: Any  # waitress's: what receives the body, None without one
    error: Any  # waitress's: the error answering the request, None without one

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
        elif self.content_length >= self.adj.max_request_body_size:
            # A body past what the server reads at all is not waited for: the refusal is
            # answered as the headers end and the connection closed, its body never read.
            self.body_rcv = None
            self.headers["CONNECTION"] = "close"
        else:
            self.body_rcv = FixedStreamReceiver(self.content_length, _Dropped())

    def received(self, data: bytes) -> int:
        """waitress's, but a request refused on its headers keeps its refusal: waitress's own
        413 for a body past its limit would tell a caller without the token the limit."""
        consumed: int = super().received(data)
        if self.refused is not None and isinstance(self.error, RequestEntityTooLarge):
            self.error = None  # answered by the application with its refusal; nothing more read
            self.headers["CONNECTION"] = "close"
        return consumed


class _HeadersOnly:
    """A task whose answer to HEAD is its headers alone (RFC 9110 9.3.2): whatever body the
    application or waitress's error answer has is not sent, nor a chunked stream's end."""

    request: Any
    chunked_response: bool

    @property
    def head(self) -> bool:
        """The request is a HEAD (a request waitress could not parse has no method)."""
        return getattr(self.request, "command", None) == "HEAD"

    def write(self, data: bytes) -> None:
        super().write(b"" if self.head else data)  # type: ignore[misc]

    def finish(self) -> None:
        if self.head:
            self.chunked_response = False  # no "0\r\n\r\n": a HEAD answer has no body at all
        super().finish()  # type: ignore[misc]


class _ErrorTask(_HeadersOnly, ErrorTask):  # type: ignore[misc]
    """waitress's own error answers (400, 413, 431, ...), headers only to HEAD."""


class _Task(_HeadersOnly, WSGITask):  # type: ignore[misc]
    """waitress's task, telling the application that a request is cut (`CUT` in the environ)
    or was refused on its headers (`REFUSED`); headers only to HEAD."""

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
    `Server.maintenance`.
    """

    task_class = _Task
    error_task_class = _ErrorTask
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


class Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server whose sweep also closes a connection whose request is overdue, and
    which, every slot taken, closes the connection idle the longest for a new one."""

    channel_class = _Channel
    next_channel_cleanup: float  # waitress's: when its sweep runs next

    def __init__(
        self, *args: Any, max_request: float, screen: Screen | None, name: str, **kwargs: Any
    ) -> None:
        self.name = name  # which server its log lines are of (`otlp`, `http`: the pages)
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
                "%s: all %d connections were taken; closing the idlest idle ones for new"
                " connections (%d so far)",
                self.name,
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
                        "%s %s: closed: request not received whole within %gs",
                        self.name,
                        channel.addr[0] if channel.addr else "?",
                        self.max_request,
                    )
                channel.will_close = True  # the loop closes it (`HTTPChannel.handle_write`)


@dataclass(frozen=True)
class Bounds:
    """What a server grants: its clients together, and each one."""

    ident: str  # the Server header of its answers (and of waitress's own error answers)
    max_body: int  # bytes of a request's body as it comes; past it, waitress answers 413
    idle_timeout: int  # seconds a connection may stay silent both ways (waitress's channel_timeout)
    max_request: float  # seconds from a request's first byte until it is whole; slower, closed
    workers: int = 4  # threads serving whole requests (idle connections hold none)
    connections: int = 256  # slots; every one taken, the idlest idle connection goes for a new one
    sweep_every: int = 1  # seconds between the sweeps closing idle and slow connections


class BoundedServer:
    """waitress serving `app` on `host:port` within `bounds`, in a thread of its own.

    `start()` serves, `address` is where (port 0 picks a free one), `close(timeout)` stops it.
    A subclass names itself: `name` begins its log lines, `title` is what they call it,
    `thread_name` its thread's, `log` the logger of the unexpected stop; `flag` is the option its
    usage errors name. `every_address`: one server per address the host resolves to (localhost
    may be two), sharing the loop and the workers, as waitress.create_server does; else the
    first only. `screen` judges each request on its headers (None: none is).
    """

    name: ClassVar[str] = "http"
    title: ClassVar[str] = "the server"
    thread_name: ClassVar[str] = "watchdog-http"
    log: ClassVar[logging.Logger] = log

    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        bounds: Bounds,
        *,
        flag: str,
        screen: Screen | None = None,
        every_address: bool = True,
    ) -> None:
        self.bounds = bounds
        self._map: dict[int, Any] = {}
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "queue depth" per burst
        try:
            adjustments = Adjustments(
                host=host,
                port=port,
                threads=bounds.workers,
                connection_limit=bounds.connections,
                channel_timeout=bounds.idle_timeout,
                cleanup_interval=bounds.sweep_every,
                max_request_body_size=bounds.max_body,
                asyncore_use_poll=True,
                ident=bounds.ident,
                clear_untrusted_proxy_headers=False,
            )
        except ValueError:  # the host resolves to no address
            raise UsageError(f"{flag}: cannot listen on {host}:{port}: no such address") from None
        workers = ThreadedTaskDispatcher()
        workers.set_thread_count(bounds.workers)
        listen = adjustments.listen if every_address else adjustments.listen[:1]
        try:
            servers = [
                Server(
                    app,
                    self._map,
                    dispatcher=workers,
                    adj=adjustments,
                    sockinfo=sockinfo,
                    max_request=bounds.max_request,
                    screen=screen,
                    name=self.name,
                )
                for sockinfo in listen
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
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    @property
    def thread(self) -> threading.Thread:
        """The thread its loop runs in (once `start()`ed)."""
        return self._thread

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._server.run()
        except Exception:  # the loop must never take the daemon down
            self.log.exception("%s: %s stopped unexpectedly", self.name, self.title)

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, let the requests in progress finish (bounded), close every connection."""
        self._server.task_dispatcher.shutdown(cancel_pending=False, timeout=timeout)
        pull = next((d for d in list(self._map.values()) if isinstance(d, trigger)), None)
        try:
            if pull is None:  # the loop can no longer be woken: the server closed itself
                raise OSError
            pull.pull_trigger(lambda: wasyncore.close_all(self._map))
        except OSError:  # the trigger was closed meanwhile (EBADF): close from here
            self.log.debug(
                "%s: %s's trigger was closed; closing its sockets directly", self.name, self.title
            )
            wasyncore.close_all(self._map)
        if self._thread.is_alive():
            self._thread.join(timeout)
