"""OTLP/gRPC: the `LogsService` and `TraceService` Export calls into the same receiver as OTLP/HTTP.

grpcio's asyncio server runs in a thread of its own, so a call waiting for
its message holds no thread: each Export is handed in as a stream of bytes
when its headers come, and judged before its message is awaited (the token
from the metadata, the admission); then it takes one of RECEIVING turns to
receive and decode its message (grpcio holds a message whole while it comes,
and lets a call send more than its stream's window only once its message is
asked for), at most QUEUE calls waiting, and its message must come whole
within MAX_RECEIVE of its headers, as OTLP/HTTP bounds a request. grpcio
tells nothing of a message until it is whole, so a call that sends nothing
looks like one sending slowly: a call whose message has not come within
TURN_GRACE of its turn gives its turn up and waits on without one, and, with
READERS calls waiting for their message, the one idle longest is ended for a
new call (`Turns`). Records and messages are counted on the bytes before
anything is decoded, in WORKERS threads; a refusal maps to its gRPC code,
with RetryInfo whenever it is for load
(docs/start-without-clickhouse.md#answers-limits-and-backpressure,
docs/guarantees.md#hardening-round-4, docs/guarantees.md#hardening-round-5).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2

from watchdog.core.errors import UsageError
from watchdog.core.settings.ingest import parse_listen
from watchdog.daemon.ingest.otlp import PROTOBUF, SIGNALS, Signal, response_message
from watchdog.daemon.ingest.receiver import Receiver, Refused

log = logging.getLogger(__name__)

WORKERS = 4  # threads decoding messages (the DecodeBudget bounds their memory together)
# Calls in their turn at once: receiving their message (for TURN_GRACE at most while it has not
# come) or decoding it. grpcio holds a message whole, up to max_body, once it is asked for; a call
# not yet in its turn waits unread (its stream's flow-control window, 64 KiB, is all it may send).
RECEIVING = 4
# Seconds a call holds its turn while its message has not come; then it waits on without one.
TURN_GRACE = 1.0
# Calls whose message has been asked for and not yet decoded, in their turn or not (grpcio may hold
# each whole, up to max_body); with every one taken, the one idle longest is ended for a new turn.
READERS = 2 * RECEIVING
# Seconds from a call's headers until its message is received whole, as OTLP/HTTP's MAX_REQUEST.
MAX_RECEIVE = 30.0
SLOT_WAIT = 5.0  # seconds a call may wait for a turn; then RESOURCE_EXHAUSTED, with RetryInfo
# Calls waiting for a turn at once (grpcio buffers some of a waiting call's message, a few MiB);
# beyond, a call is refused at once for load: RESOURCE_EXHAUSTED, with RetryInfo.
QUEUE = 4
MAX_CALLS = READERS + QUEUE  # calls in progress at most
IDLE_MS = 5 * 60 * 1000  # a connection with no call for this long is closed (GOAWAY)
SAY_EVERY = 60.0  # seconds between the log lines about calls cut for their slow message
# grpcio keeps each call, its message included, in reference cycles that only Python's garbage
# collector frees, and the collector runs by counts of objects, not bytes: after a message of
# this size or more, a collection follows the call's end (at most one every COLLECT_AFTER s).
LARGE = 1024 * 1024
COLLECT_AFTER = 0.5

CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
}


class _Export:
    """One signal's Export: judged on its metadata, its message received within its bound and
    decoded in a worker, the response out."""

    def __init__(self, server: GrpcServer, signal: Signal) -> None:
        self.server, self.signal = server, signal

    async def call(self, requests: AsyncIterator[bytes], context: Any) -> Any:
        server, receiver, signal = self.server, self.server.receiver, self.signal
        arrived = time.monotonic()
        large = False
        try:
            metadata = dict(context.invocation_metadata() or ())
            receiver.check_token(metadata.get("authorization"))  # before the message is awaited
            receiver.admit()
            # Its message is asked for only in its turn.
            async with server.turns.take(arrived, server.max_receive) as reader:
                body = await server.receive(requests, arrived, reader)
                large = len(body) >= LARGE
                loop = asyncio.get_running_loop()
                batch = await loop.run_in_executor(
                    server.workers, receiver.accept, signal, body, PROTOBUF
                )
                del body
        except Refused as refused:
            receiver.counts.refuse(refused.status)
            log.debug("otlp grpc %s: %d %s", signal, refused.status, refused)
            await _abort(context, refused)
        except Exception as exc:  # a bug of ours: one line, INTERNAL, never a traceback per call
            log.warning("otlp grpc %s: %s: %s", signal, type(exc).__name__, exc)
            receiver.counts.refuse(500)
            await _abort(context, Refused(500, "internal error"))
        finally:
            if large:
                server.collect_soon()
        return response_message(signal, batch)


async def _abort(context: Any, refused: Refused) -> NoReturn:
    """End the call with the refusal's code, and RetryInfo when the same request may come again."""
    code = CODES.get(refused.status, grpc.StatusCode.INTERNAL)
    if refused.retry_after_s is not None:
        retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=refused.retry_after_s))
        status = status_pb2.Status(code=code.value[0], message=refused.message)
        status.details.add().Pack(retry)
        context.set_trailing_metadata(
            (
                ("grpc-status-details-bin", status.SerializeToString()),
                ("google.rpc.retryinfo-bin", retry.SerializeToString()),
            )
        )
    await context.abort(code, refused.message)
    raise AssertionError("grpc's abort returns only by raising")


@dataclass(eq=False)
class Reader:
    """A call whose message has been asked for: since when, whether it has come, and the future
    set when the call is ended for a new one (`Turns`)."""

    since: float
    ended: asyncio.Future[None]
    received: bool = False


class Turns:
    """Which calls may ask grpcio for their message (and have it held whole): RECEIVING in their
    turn, a call holding its turn while its message has not come for TURN_GRACE at most (then
    it waits on, idle, without one), READERS at most in all (then the one idle longest is ended
    for a new turn), QUEUE waiting for a turn, in order. Used in the server's loop thread only."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.readers: list[Reader] = []  # oldest first
        self.waiting: collections.deque[asyncio.Future[Reader]] = collections.deque()
        self.ended = 0  # idle calls ended for a new turn

    def _idle(self, reader: Reader, now: float) -> bool:
        return not reader.received and now - reader.since >= self.grace

    def _room(self, now: float) -> bool:
        if sum(not self._idle(r, now) for r in self.readers) >= RECEIVING:
            return False
        return len(self.readers) < READERS or any(self._idle(r, now) for r in self.readers)

    def _admit(self, now: float) -> Reader:
        """A turn for a call, the call idle longest ended first when READERS are taken."""
        loop = asyncio.get_running_loop()
        if len(self.readers) >= READERS:
            oldest = next(r for r in self.readers if self._idle(r, now))
            self.readers.remove(oldest)
            oldest.ended.set_result(None)
            self.ended += 1
        reader = Reader(now, loop.create_future())
        self.readers.append(reader)
        loop.call_later(self.grace, self._grant)  # idle then: a waiting call may take its turn
        return reader

    def _grant(self) -> None:
        """Turns to the calls waiting, in order, while there is room."""
        now = time.monotonic()
        while self.waiting and self._room(now):
            waiter = self.waiting.popleft()
            if not waiter.done():  # else it stopped waiting (its wait ran out, or it was cancelled)
                waiter.set_result(self._admit(now))

    @contextlib.asynccontextmanager
    async def take(self, arrived: float, max_receive: float) -> AsyncIterator[Reader]:
        """A turn, waited for at most SLOT_WAIT within the call's bound; with QUEUE calls waiting
        already, none (Refused 429 for load)."""
        now = time.monotonic()
        if not self.waiting and self._room(now):
            reader = self._admit(now)
        else:
            if len(self.waiting) >= QUEUE:
                raise Refused(429, f"{MAX_CALLS} calls in progress; come back later")
            wait = min(SLOT_WAIT, max(0.0, arrived + max_receive - now))
            waiter: asyncio.Future[Reader] = asyncio.get_running_loop().create_future()
            self.waiting.append(waiter)
            try:
                reader = await asyncio.wait_for(waiter, wait)
            except TimeoutError:
                raise Refused(
                    429, f"no turn within {wait:g}s: {MAX_CALLS} calls in progress"
                ) from None
            except asyncio.CancelledError:  # the call ended as its turn came: give it back
                if waiter.done() and not waiter.cancelled():
                    self._release(waiter.result())
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(waiter)
        try:
            yield reader
        finally:
            self._release(reader)

    def _release(self, reader: Reader) -> None:
        with contextlib.suppress(ValueError):  # already gone when it was ended for a new call
            self.readers.remove(reader)
        self._grant()


class GrpcServer:
    """grpcio's asyncio server serving the receiver's two services on `listen`, in a thread of
    its own; `close()` stops it."""

    def __init__(
        self,
        receiver: Receiver,
        listen: str,
        *,
        flag: str = "--otlp-grpc",
        max_receive: float = MAX_RECEIVE,
        turn_grace: float = TURN_GRACE,
    ) -> None:
        try:
            host, port = parse_listen(listen, flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.receiver = receiver
        self.max_receive = max_receive
        self.turns = Turns(turn_grace)  # used in the loop's thread only
        self._collecting = False  # a garbage collection is due (collect_soon)
        self.cut = 0  # calls ended for a message not whole within max_receive
        self._said = 0.0
        self.workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="watchdog-otlp-grpc")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="watchdog-otlp-grpc-loop", daemon=True
        )
        self._thread.start()
        self._server: Any = None
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = asyncio.run_coroutine_threadsafe(self._start(bind), self._loop).result(30)
        except (RuntimeError, OSError) as exc:
            self._stop_loop()
            raise UsageError(f"{flag}: cannot listen on {host}:{port}: {exc}") from None
        if bound == 0:
            self.close()
            raise UsageError(f"{flag}: cannot listen on {host}:{port}")
        self.address: tuple[str, int] = (host, bound)

    async def _start(self, bind: str) -> int:
        options = [
            ("grpc.max_receive_message_length", self.receiver.settings.max_body),
            ("grpc.max_send_message_length", 1024 * 1024),
            ("grpc.max_connection_idle_ms", IDLE_MS),
            ("grpc.so_reuseport", 0),
            # A call is read only in its turn: until then it may send its window and no more.
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 64 * 1024),
        ]
        # No grpcio limit on calls: it would refuse them without RetryInfo; ours say it.
        server = grpc.aio.server(options=options)
        handlers = []
        for signal, handler in SIGNALS.items():
            method = grpc.stream_unary_rpc_method_handler(
                _Export(self, signal).call, response_serializer=handler.response.SerializeToString
            )
            handlers.append(
                grpc.method_handlers_generic_handler(handler.service, {"Export": method})
            )
        server.add_generic_rpc_handlers(handlers)
        bound = int(server.add_insecure_port(bind))
        if bound:
            await server.start()
        self._server = server
        return bound

    async def receive(
        self, requests: AsyncIterator[bytes], arrived: float, reader: Reader
    ) -> bytes:
        """The call's one message, received within max_receive of its headers (Refused 408), or
        Refused 429 when the call is ended, idle, for a new turn."""
        left = max(0.0, arrived + self.max_receive - time.monotonic())
        message: asyncio.Future[bytes] = asyncio.ensure_future(anext(requests))
        either: set[asyncio.Future[Any]] = {message, reader.ended}
        try:
            await asyncio.wait(either, timeout=left, return_when="FIRST_COMPLETED")
        finally:
            if not message.done():
                message.cancel()
        if message.done() and not message.cancelled():
            try:
                body = message.result()
            except StopAsyncIteration:
                raise Refused(400, "an Export call carries one request message") from None
            reader.received = True
            return body
        if reader.ended.done():
            self._say("ended")
            raise Refused(
                429,
                f"no message within {self.turns.grace:g}s of its turn, and its"
                " place was wanted by a new call; come back later",
            )
        self._say("cut")
        raise Refused(408, f"the request was not received whole within {self.max_receive:g}s")

    def collect_soon(self) -> None:
        """Run the garbage collector once the calls in progress have ended (see LARGE)."""
        if not self._collecting:
            self._collecting = True
            self._loop.call_later(COLLECT_AFTER, self._collect)

    def _collect(self) -> None:
        self._collecting = False
        gc.collect()

    def _say(self, why: str) -> None:
        """Count a call ended without its message; a warning once a minute at most."""
        if why == "cut":
            self.cut += 1
        now = time.monotonic()
        if now - self._said >= SAY_EVERY:
            self._said = now
            log.warning(
                "otlp grpc: %d call(s) so far did not send their request within %gs of their"
                " headers (each ended: DEADLINE_EXCEEDED), %d waiting for theirs without a turn"
                " were ended for new calls (RESOURCE_EXHAUSTED)",
                self.cut,
                self.max_receive,
                self.turns.ended,
            )

    def close(self, grace: float = 5.0) -> None:
        """Refuse new calls, let those in progress finish within `grace` seconds."""
        if self._server is not None:
            stopping = asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop)
            try:
                stopping.result(grace + 5)
            except Exception as exc:  # stopping must not fail the daemon's stop
                log.debug("otlp grpc: stopping: %s", exc)
        self._stop_loop()
        self.workers.shutdown(wait=False, cancel_futures=True)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()


def retry_after_s(error: Any) -> float | None:
    """The RetryInfo delay of a refused call's trailing metadata, None without one (tests)."""
    found = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
    if found is None:
        return None
    retry = error_details_pb2.RetryInfo.FromString(found)
    return float(retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9)
