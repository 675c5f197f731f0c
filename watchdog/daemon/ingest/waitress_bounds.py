"""waitress, bounded for strangers: requests judged on their headers, slow ones cut, idle ones reused.

OTLP/HTTP's server (watchdog.daemon.ingest.otlp_http) is waitress with these
parts of ours: a request is judged on its headers as they end (a refused
body is read and dropped, never kept, and no `100 Continue` is sent), one
whose client stops sending mid-body is handed on marked cut (answered 400),
one not received whole within its bound of its first byte has its connection
closed, and with every connection slot taken the idlest idle connection is
closed for a new one (as nginx reuses keep-alive connections)
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.receiver import ChunkedReceiver, FixedStreamReceiver
from waitress.server import TcpWSGIServer
from waitress.task import WSGITask

from watchdog.daemon.ingest.receiver import Refused

log = logging.getLogger(__name__)

CUT = "memory_watchdog.cut"  # in the WSGI environ: True when the client stopped mid-body
REFUSED = "memory_watchdog.refused"  # in the WSGI environ: the refusal its headers earned
SCREENED = "memory_watchdog.screened"  # in the WSGI environ: True once its headers were judged

# How a header is read: by waitress's parser name (`AUTHORIZATION`, `CONTENT_TYPE`, ...).
Header = Callable[[str], str | None]


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
    `Server.maintenance`.
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


class Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server whose sweep also closes a connection whose request is overdue, and
    which, every slot taken, closes the connection idle the longest for a new one."""

    channel_class = _Channel
    next_channel_cleanup: float  # waitress's: when its sweep runs next

    def __init__(
        self, *args: Any, max_request: float, screen: Screen, name: str = "otlp", **kwargs: Any
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
