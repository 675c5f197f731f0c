"""OTLP/gRPC: the `LogsService` and `TraceService` Export calls into the same receiver as OTLP/HTTP.

Each signal's service (by its generated descriptor's name) takes the request
as bytes, so records and messages are counted before it is decoded; a
refusal maps to its gRPC code, with RetryInfo when the same request may come
again (docs/start-without-clickhouse.md#answers-limits-and-backpressure,
docs/guarantees.md#the-otlp-receiver).
"""

from __future__ import annotations

import logging
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

WORKERS = 4
MAX_WAITING = 64  # calls in progress or waiting for a worker; beyond, RESOURCE_EXHAUSTED
IDLE_MS = 5 * 60 * 1000  # a connection with no call for this long is closed (GOAWAY)

CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
}


class _Export:
    """One signal's Export: the request as bytes in (counted before it is decoded), the response out."""

    def __init__(self, receiver: Receiver, signal: Signal) -> None:
        self.receiver, self.signal = receiver, signal

    def __call__(self, body: bytes, context: grpc.ServicerContext) -> Any:
        receiver, signal = self.receiver, self.signal
        try:
            metadata = dict(context.invocation_metadata())
            receiver.check_token(metadata.get("authorization"))
            receiver.admit()
            batch = receiver.accept(signal, body, PROTOBUF)
        except Refused as refused:
            receiver.counts.refuse(refused.status)
            log.debug("otlp grpc %s: %d %s", signal, refused.status, refused)
            _abort(context, refused)
        except Exception as exc:  # a bug of ours: one line, INTERNAL, never a traceback per call
            log.warning("otlp grpc %s: %s: %s", signal, type(exc).__name__, exc)
            receiver.counts.refuse(500)
            _abort(context, Refused(500, "internal error"))
        return response_message(signal, batch)


def _abort(context: grpc.ServicerContext, refused: Refused) -> NoReturn:
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
    context.abort(code, refused.message)
    raise AssertionError("grpc's abort returns only by raising")


class GrpcServer:
    """grpcio serving the receiver's two services on `listen`; `close()` stops it."""

    def __init__(self, receiver: Receiver, listen: str, *, flag: str = "--otlp-grpc") -> None:
        try:
            host, port = parse_listen(listen, flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        options = [
            ("grpc.max_receive_message_length", receiver.settings.max_body),
            ("grpc.max_send_message_length", 1024 * 1024),
            ("grpc.max_connection_idle_ms", IDLE_MS),
            ("grpc.so_reuseport", 0),
        ]
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="watchdog-otlp-grpc"),
            options=options,
            maximum_concurrent_rpcs=MAX_WAITING,
        )
        handlers = []
        for signal, handler in SIGNALS.items():
            method = grpc.unary_unary_rpc_method_handler(
                _Export(receiver, signal), response_serializer=handler.response.SerializeToString
            )
            handlers.append(
                grpc.method_handlers_generic_handler(handler.service, {"Export": method})
            )
        self._server.add_generic_rpc_handlers(handlers)
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = self._server.add_insecure_port(bind)
        except RuntimeError as exc:
            raise UsageError(f"{flag}: cannot listen on {host}:{port}: {exc}") from None
        if bound == 0:
            raise UsageError(f"{flag}: cannot listen on {host}:{port}")
        self.address: tuple[str, int] = (host, bound)
        self._server.start()

    def close(self, grace: float = 5.0) -> None:
        """Refuse new calls, let those in progress finish within `grace` seconds."""
        self._server.stop(grace).wait(grace + 1)


def retry_after_s(error: Any) -> float | None:
    """The RetryInfo delay of a refused call's trailing metadata, None without one (tests)."""
    found = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
    if found is None:
        return None
    retry = error_details_pb2.RetryInfo.FromString(found)
    return float(retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9)
