"""OTLP/gRPC: the `LogsService` and `TraceService` Export calls into the same receiver as OTLP/HTTP.

grpcio's asyncio server runs in a thread of its own, so a call waiting for
its message holds no thread: each Export is handed in as a stream of bytes
when its headers come, and judged before its message is awaited (the token
from the metadata, the admission); then it waits for one of RECEIVING turns
to receive and decode its message (grpcio holds a message whole while it
comes), at most QUEUE calls waiting, and its message must come whole within
MAX_RECEIVE of its headers, as OTLP/HTTP bounds a request. Records and messages are counted on the bytes
before anything is decoded, in WORKERS threads; a refusal maps to its gRPC
code, with RetryInfo whenever it is for load
(docs/start-without-clickhouse.md#answers-limits-and-backpressure,
docs/guarantees.md#hardening-round-4).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
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
# Calls receiving or decoding their message at once: grpcio holds each whole, up to max_body; the
# others wait unread (their stream's flow-control window, 64 KiB, is all they may send).
RECEIVING = 4
# Seconds from a call's headers until its message is received whole, as OTLP/HTTP's MAX_REQUEST.
MAX_RECEIVE = 30.0
SLOT_WAIT = 5.0  # seconds a call may wait for a turn; then RESOURCE_EXHAUSTED, with RetryInfo
# Calls waiting for a turn at once (grpcio buffers some of a waiting call's message, a few MiB);
# beyond, a call is refused at once for load: RESOURCE_EXHAUSTED, with RetryInfo.
QUEUE = 4
MAX_CALLS = RECEIVING + QUEUE  # calls in progress at most
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
            async with server.turn(arrived):  # a body is held only in its turn, decoded too
                body = await server.receive(requests, arrived)
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
    ) -> None:
        try:
            host, port = parse_listen(listen, flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.receiver = receiver
        self.max_receive = max_receive
        self.queued = 0  # calls waiting for a turn; read and written in the loop's thread only
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
        self._receiving: asyncio.Semaphore | None = None
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
        self._receiving = asyncio.Semaphore(RECEIVING)
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

    @contextlib.asynccontextmanager
    async def turn(self, arrived: float) -> AsyncIterator[None]:
        """One of RECEIVING turns to receive a message and decode it (grpcio holds a message
        whole, up to max_body, once it is read): waited for at most SLOT_WAIT, within the
        call's bound; with QUEUE calls waiting already, none (Refused 429 for load)."""
        assert self._receiving is not None
        if self._receiving.locked() and self.queued >= QUEUE:
            raise Refused(429, f"{MAX_CALLS} calls in progress; come back later")
        deadline = arrived + self.max_receive
        wait = min(SLOT_WAIT, max(0.0, deadline - time.monotonic()))
        self.queued += 1
        try:
            await asyncio.wait_for(self._receiving.acquire(), wait)
        except TimeoutError:
            raise Refused(429, f"no turn within {wait:g}s: {MAX_CALLS} calls in progress") from None
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            self._receiving.release()

    async def receive(self, requests: AsyncIterator[bytes], arrived: float) -> bytes:
        """The call's one message, received within max_receive of its headers (Refused 408)."""
        left = max(0.0, arrived + self.max_receive - time.monotonic())
        try:
            return await asyncio.wait_for(anext(requests), left)
        except StopAsyncIteration:
            raise Refused(400, "an Export call carries one request message") from None
        except TimeoutError:
            self._cut()
            raise Refused(
                408, f"the request was not received whole within {self.max_receive:g}s"
            ) from None

    def collect_soon(self) -> None:
        """Run the garbage collector once the calls in progress have ended (see LARGE)."""
        if not self._collecting:
            self._collecting = True
            self._loop.call_later(COLLECT_AFTER, self._collect)

    def _collect(self) -> None:
        self._collecting = False
        gc.collect()

    def _cut(self) -> None:
        self.cut += 1
        now = time.monotonic()
        if now - self._said >= SAY_EVERY:
            self._said = now
            log.warning(
                "otlp grpc: %d call(s) so far did not send their request within %gs of their"
                " headers; each was ended (DEADLINE_EXCEEDED)",
                self.cut,
                self.max_receive,
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
