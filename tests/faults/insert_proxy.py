"""A TCP proxy on 127.0.0.1 that lets the server commit an INSERT, then keeps its answer from the client.

`InsertAnswerProxy(target_port)` forwards every request to a ClickHouse HTTP
interface (the tests' harness, tests/faults/chserver.py) and every answer
back, but for an `INSERT` sent while `drop` is set: the request goes to the
server whole, the server commits the rows and answers, and the answer never
reaches the client. With `drop = "lose"` the client's connection is closed
as the answer arrives (the answer is lost on the way); with `drop = "stall"`
it is held open and nothing more is sent, until the client gives up (its
receive timeout: the insert "timed out" after the store took it). `dropped`
counts the answers kept back.

An INSERT is recognised by its request line: clickhouse-connect sends the
statement in the `query` URL parameter (`query=INSERT+INTO+...`).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from types import TracebackType

HOST = "127.0.0.1"
_POLL_S = 0.05


class InsertAnswerProxy:
    """Forwards to `target_port`; while `drop` is set, an INSERT's answer never reaches its client."""

    def __init__(self, target_port: int, *, target_host: str = HOST) -> None:
        self.target = (target_host, target_port)
        self.drop: str | None = None
        self.dropped = 0  # INSERT answers kept from their client
        self.inserts = 0  # INSERT requests forwarded
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> InsertAnswerProxy:
        thread = threading.Thread(target=self._accept, name=f"insertproxy-{self.port}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(timeout=2)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listener], [], [], _POLL_S)
            if not ready:
                continue
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.callback(conn.close)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                return
            stack.callback(upstream.close)
            answering = True  # the last bytes went to the client: the next ones start a request
            insert = False  # the request in progress is an INSERT
            while not self._stop.is_set():
                ready, _, _ = select.select([conn, upstream], [], [], _POLL_S)
                for source in ready:
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is conn:
                        if answering:
                            line = data.split(b"\r\n", 1)[0]
                            insert = b"query=INSERT" in line or b"query=insert" in line
                            if insert:
                                with self._lock:
                                    self.inserts += 1
                        answering = False
                        upstream.sendall(data)
                        continue
                    answering = True
                    mode = self.drop
                    if insert and mode is not None:  # the server committed: keep its answer
                        with self._lock:
                            self.dropped += 1
                        if mode == "stall":
                            self._hold(conn)
                        return
                    conn.sendall(data)

    def _hold(self, conn: socket.socket) -> None:
        """Send nothing more; wait for the client to give up (or the proxy to close)."""
        while not self._stop.is_set():
            ready, _, _ = select.select([conn], [], [], _POLL_S)
            if ready:
                with contextlib.suppress(OSError):
                    if conn.recv(65536):
                        continue
                return
