"""A fault-injecting TCP proxy on 127.0.0.1, for putting a failing network in front of a server.

`FaultProxy(target_port)` listens on an ephemeral 127.0.0.1 port and treats
each accepted connection according to the mode in force when it arrived:

- `pass`: forward bytes both ways, unchanged.
- `refuse`: the listening socket is closed, so connecting fails with
  "connection refused" (the port is re-bound when the mode changes back).
- `reset`: accept, then reset the connection at once (RST, no response).
- `close_mid_response`: forward the request, pass only the first
  `truncate_after` bytes of the response, then close the connection.
- `stall`: accept and read, never answer, until the proxy closes, the mode
  changes, the client gives up, or `stall_limit_s` passes.
- `http_500`: answer `500 Internal Server Error` with a ClickHouse exception
  body and `X-ClickHouse-Exception-Code` (MEMORY_LIMIT_EXCEEDED by default).
- `garbage`: answer `200 OK` with headers claiming a Native result and a
  random (seeded) body. With the default seed 0, clickhouse-connect 1.12
  fails at once (StreamFailureError). Other seeds can decode a string length
  of ~10^12 bytes, on which its C reader (driverc.buffer) crashed the
  process with a segfault or spun without end when tried here (seed 2):
  change the seed only to hunt that.
- `auth_fail`: answer as ClickHouse does for a wrong password: 403 with
  `X-ClickHouse-Exception-Code: 516` and an AUTHENTICATION_FAILED body.
- `cut_request`: forward everything, except that the response to request
  number `fault_request` (counted from 1 over all connections since the mode
  was set; a keep-alive connection carries many) is cut after
  `truncate_after` bytes (or, with `cut_in_body` set, that many bytes past
  the end of its headers; with `cut_before`, just before the first
  occurrence of those bytes, e.g. a header name). A fault in one query of
  many, not in all of them.
- `stall_request`: forward everything, except that request number
  `fault_request` is never forwarded nor answered (the client times out).

`requests` counts the requests seen in the two per-request modes, so a test
can learn how many queries a run makes and then fault each one in turn.

Changing the mode drops every open connection, so a client's pooled
keep-alive connection cannot carry the old mode into the next request. All
threads are daemon threads polling a stop event; `close()` ends them.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time
from types import TracebackType

HOST = "127.0.0.1"
MODES = (
    "pass",
    "refuse",
    "reset",
    "close_mid_response",
    "stall",
    "http_500",
    "garbage",
    "auth_fail",
    "cut_request",
    "stall_request",
)
_POLL_S = 0.05
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


class FaultProxy:
    """A TCP proxy in front of `target_host:target_port` whose faults can be switched live."""

    def __init__(
        self,
        target_port: int,
        mode: str = "pass",
        *,
        target_host: str = HOST,
        truncate_after: int = 1024,
        stall_limit_s: float = 60.0,
        garbage_size: int = 4096,
        seed: int = 0,
        error_code: int = 241,
        error_message: str = (
            "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 9.32 GiB "
            "(attempt to allocate chunk of 4194304 bytes), maximum: 9.31 GiB. "
            "(MEMORY_LIMIT_EXCEEDED) (version 24.8.4.13 (official build))"
        ),
        server_version: str = "24.8.4.13 (official build)",
    ) -> None:
        self._check_mode(mode)
        self.target = (target_host, target_port)
        self.truncate_after = truncate_after
        self.stall_limit_s = stall_limit_s
        self.garbage_size = garbage_size
        self.seed = seed
        self.error_code = error_code
        self.error_message = error_message
        self.server_version = server_version
        self.accepted = 0  # connections accepted, over all modes
        self.fault_request = 1  # cut_request / stall_request: which request (from 1)
        self.cut_in_body: int | None = None  # cut_request: cut this far past the headers instead
        self.cut_before: bytes | None = None  # cut_request: cut just before these bytes instead
        self.requests = 0  # requests seen since the per-request mode was set
        self._mode = mode
        self._port = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: dict[socket.socket, threading.Event] = {}
        self._threads: set[threading.Thread] = set()

    # ---- lifecycle ---------------------------------------------------------

    def start(self) -> FaultProxy:
        """Bind an ephemeral 127.0.0.1 port and start accepting."""
        if self._accept_thread is not None:
            return self
        listener = self._bind(0)
        self._port = listener.getsockname()[1]
        with self._lock:
            self._listener = None if self._mode == "refuse" else listener
        if self._mode == "refuse":
            listener.close()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"faultproxy-{self._port}", daemon=True
        )
        self._accept_thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, drop every connection and wait for the threads to end."""
        self._stop.set()
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self._drop_connections()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=2)
            self._accept_thread = None
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=2)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- control -----------------------------------------------------------

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the proxy is not started")
        return self._port

    @property
    def host(self) -> str:
        return HOST

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        self.set_mode(mode)

    def set_mode(self, mode: str) -> None:
        """Switch the fault for new connections, dropping the open ones."""
        self._check_mode(mode)
        with self._lock:
            previous, self._mode = self._mode, mode
            self.requests = 0
            if self._port and not self._stop.is_set():
                if mode == "refuse" and self._listener is not None:
                    self._listener.close()
                    self._listener = None
                elif mode != "refuse" and previous == "refuse" and self._listener is None:
                    self._listener = self._bind(self._port)
        self._drop_connections()

    @staticmethod
    def _check_mode(mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r} (one of {', '.join(MODES)})")

    @staticmethod
    def _bind(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((HOST, port))
            listener.listen(64)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        return listener

    def _drop_connections(self) -> None:
        with self._lock:
            conns = list(self._conns.items())
        for sock, dropped in conns:
            dropped.set()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ---- accepting ---------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                listener = self._listener
            if listener is None:
                self._stop.wait(_POLL_S)
                continue
            try:
                ready, _, _ = select.select([listener], [], [], _POLL_S)
            except (OSError, ValueError):
                continue  # closed by set_mode("refuse") while waiting
            if not ready:
                continue
            with self._lock:
                if listener is not self._listener:
                    continue
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                mode = self._mode
                dropped = threading.Event()
                self._conns[conn] = dropped
                self.accepted += 1
                thread = threading.Thread(
                    target=self._serve, args=(conn, mode, dropped), daemon=True
                )
                self._threads.add(thread)
            thread.start()

    def _serve(self, conn: socket.socket, mode: str, dropped: threading.Event) -> None:
        try:
            conn.setblocking(True)
            if mode == "reset":
                _reset(conn)
            elif mode in ("pass", "close_mid_response", "cut_request", "stall_request"):
                self._pipe(conn, mode, dropped)
            elif mode == "stall":
                self._stall(conn, dropped)
            elif self._read_request(conn, dropped):
                conn.sendall(self._canned_response(mode))
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_WR)
                self._drain(conn, dropped, limit_s=1.0)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._conns.pop(conn, None)
                self._threads.discard(threading.current_thread())

    def _alive(self, dropped: threading.Event) -> bool:
        return not (self._stop.is_set() or dropped.is_set())

    # ---- modes -------------------------------------------------------------

    def _pipe(self, conn: socket.socket, mode: str, dropped: threading.Event) -> None:
        """Forward both ways; cut (or withhold) a response as the mode says."""
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(conn)
            return
        per_request = mode in ("cut_request", "stall_request")
        answering = True  # the last bytes went server -> client: the next ones start a request
        faulted = False  # the current request is the one to fault
        held = bytearray()  # cut_request: the faulted response, until the cut point is known
        idle = 0
        with upstream:
            budget = self.truncate_after if mode == "close_mid_response" else -1
            while self._alive(dropped):
                try:
                    ready, _, _ = select.select([conn, upstream], [], [], _POLL_S)
                except (OSError, ValueError):
                    return
                if not ready and held:
                    idle += 1
                    if idle >= 4:  # the whole response was shorter than the cut: pass it on
                        conn.sendall(held)
                        held.clear()
                        faulted = False
                    continue
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is conn:
                        if per_request and answering:
                            with self._lock:
                                self.requests += 1
                                faulted = self.requests == self.fault_request
                        answering = False
                        if faulted and mode == "stall_request":
                            self._stall(conn, dropped)
                            return
                        upstream.sendall(data)
                        continue
                    answering = True
                    if faulted and mode == "cut_request":
                        held += data
                        idle = 0
                        cut = self._cut_point(held)
                        if cut is not None and len(held) >= cut:
                            conn.sendall(held[:cut])
                            with contextlib.suppress(OSError):
                                conn.shutdown(socket.SHUT_RDWR)
                            return
                        continue
                    if budget < 0:
                        conn.sendall(data)
                        continue
                    conn.sendall(data[:budget])
                    budget -= min(budget, len(data))
                    if budget == 0:
                        with contextlib.suppress(OSError):
                            conn.shutdown(socket.SHUT_RDWR)
                        return

    def _cut_point(self, response: bytearray) -> int | None:
        """Where to cut a faulted response (None: not known yet)."""
        if self.cut_before is not None:
            found = response.find(self.cut_before)
            return None if found < 0 else found
        if self.cut_in_body is None:
            return self.truncate_after
        head_end = response.find(b"\r\n\r\n")
        return None if head_end < 0 else head_end + 4 + self.cut_in_body

    def _stall(self, conn: socket.socket, dropped: threading.Event) -> None:
        """Read and discard whatever arrives; never answer."""
        deadline = time.monotonic() + self.stall_limit_s
        while self._alive(dropped) and time.monotonic() < deadline:
            ready, _, _ = select.select([conn], [], [], _POLL_S)
            if ready and not conn.recv(65536):
                return  # the client gave up

    def _drain(self, conn: socket.socket, dropped: threading.Event, limit_s: float) -> None:
        """Wait (briefly) for the client to close, so closing never resets unread data."""
        deadline = time.monotonic() + limit_s
        while self._alive(dropped) and time.monotonic() < deadline:
            ready, _, _ = select.select([conn], [], [], _POLL_S)
            if ready and not conn.recv(65536):
                return

    def _read_request(self, conn: socket.socket, dropped: threading.Event) -> bool:
        """Consume one HTTP request (headers, then a Content-Length or chunked body)."""
        buffer = bytearray()
        deadline = time.monotonic() + 10
        body_end: int | None = None
        chunked = False
        while self._alive(dropped) and time.monotonic() < deadline:
            if body_end is None:
                head_end = buffer.find(b"\r\n\r\n")
                if head_end >= 0:
                    head = bytes(buffer[:head_end]).decode("latin-1").lower()
                    length = 0
                    for line in head.split("\r\n")[1:]:
                        name, _, value = line.partition(":")
                        if name.strip() == "content-length":
                            length = int(value.strip() or 0)
                        elif name.strip() == "transfer-encoding" and "chunked" in value:
                            chunked = True
                    body_end = head_end + 4 + length
            if body_end is not None:
                if chunked and _chunked_complete(buffer, body_end):
                    return True
                if not chunked and len(buffer) >= body_end:
                    return True
            if len(buffer) > _MAX_REQUEST_BYTES:
                return True
            ready, _, _ = select.select([conn], [], [], _POLL_S)
            if ready:
                data = conn.recv(65536)
                if not data:
                    return False
                buffer += data
        return False

    def _canned_response(self, mode: str) -> bytes:
        if mode == "http_500":
            body = (self.error_message.rstrip() + "\n").encode()
            return _http(
                "500 Internal Server Error",
                {
                    "Content-Type": "text/plain; charset=UTF-8",
                    "X-ClickHouse-Exception-Code": str(self.error_code),
                },
                body,
            )
        if mode == "auth_fail":
            body = (
                "Code: 516. DB::Exception: default: Authentication failed: password is "
                "incorrect, or there is no user with such name. (AUTHENTICATION_FAILED) "
                f"(version {self.server_version})\n"
            ).encode()
            return _http(
                "403 Forbidden",
                {"Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Exception-Code": "516"},
                body,
            )
        body = random.Random(self.seed).randbytes(self.garbage_size)
        return _http(
            "200 OK",
            {
                "Content-Type": "application/octet-stream",
                "X-ClickHouse-Format": "Native",
                "X-ClickHouse-Timezone": "UTC",
                "X-ClickHouse-Query-Id": "00000000-0000-0000-0000-000000000000",
                "X-ClickHouse-Summary": '{"read_rows":"1","read_bytes":"1","result_rows":"1"}',
            },
            body,
        )


def _http(status: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def _chunked_complete(buffer: bytearray, start: int) -> bool:
    """Whether a chunked body starting at `start` has reached its last (zero) chunk."""
    pos = start
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return False
        try:
            size = int(bytes(buffer[pos:line_end]).split(b";")[0].strip() or b"0", 16)
        except ValueError:
            return True  # not chunked after all: stop reading
        if size == 0:
            return buffer.find(b"\r\n\r\n", line_end) >= 0
        pos = line_end + 2 + size + 2
        if pos > len(buffer):
            return False


def _reset(conn: socket.socket) -> None:
    """Close with SO_LINGER 0, so the peer sees a reset rather than an orderly close."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.close()
