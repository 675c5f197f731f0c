"""OTLP/gRPC against calls that open a stream and never send their message: they hold nothing.

grpcio handed a unary call to one of 4 workers when its headers came, and
the token was checked only once the whole message was in: four calls that
never sent theirs shut OTLP/gRPC down for every agent (DEADLINE_EXCEEDED),
64 of them made grpcio answer RESOURCE_EXHAUSTED "Concurrent RPC limit
exceeded!" without RetryInfo (a Collector drops the data on it), and no log
line or metric said so (issue 32, findings 2 and 3). Now the token is read
from the metadata before the message is awaited, a call's message must come
within a bound of its headers, and every refusal for load carries RetryInfo.
Each case is also sent by the Python SDK's OTLP/gRPC exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from tests.builder import T0, M, Scenario
from tests.ingest.conftest import Receiving
from tests.ingest.sdk import send_logs_grpc
from tests.ingest.test_receiver import logs_request
from watchdog.daemon.ingest.otlp_grpc import (
    MAX_CALLS,
    READERS,
    RECEIVING,
    TURN_GRACE,
    WORKERS,
    retry_after_s,
)

TOKEN = "s3cret-token"
EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


class Silent:
    """A request stream that sends nothing until released, then ends (no message at all)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def __iter__(self) -> Silent:
        return self

    def __next__(self) -> bytes:
        self.released.wait(120)
        raise StopIteration


@contextmanager
def silent_calls(target: str, count: int, metadata: Any = ()) -> Iterator[list[Any]]:
    """`count` Export calls whose headers go out and whose message never does; their futures."""
    silence = Silent()
    with grpc.insecure_channel(target) as channel:
        export = channel.stream_unary(EXPORT)
        calls = [export.future(silence, metadata=metadata) for _ in range(count)]
        try:
            yield calls
        finally:
            silence.released.set()
            for call in calls:
                call.cancel()


def one_export(target: str, metadata: Any = AUTH, timeout: float = 10) -> Any:
    with grpc.insecure_channel(target) as channel:
        request = ExportLogsServiceRequest.FromString(logs_request(2))
        return LogsServiceStub(channel).Export(request, metadata=metadata, timeout=timeout)


def agent_events() -> Scenario:
    scenario = Scenario()
    scenario.session("s1").starts(T0).recalls(T0 + M)
    return scenario


def code_of(call: Any, timeout: float = 30) -> grpc.StatusCode:
    """The status a call ended with (its future), waited for at most `timeout` seconds."""
    try:
        error = call.exception(timeout=timeout)
    except grpc.FutureTimeoutError:
        pytest.fail(f"the call was not ended within {timeout}s")
    assert error is not None, "the call succeeded"
    code: grpc.StatusCode = error.code()
    return code


def test_calls_without_the_token_are_refused_before_their_message(
    receiving: Callable[..., Receiving],
) -> None:
    """Twice as many calls as there are workers, without the token, send their headers and
    never their message: each is UNAUTHENTICATED at once, and a call with the token is answered
    (before: each waited for its message, and the call with the token got DEADLINE_EXCEEDED)."""
    receiver = receiving(grpc=True, token=TOKEN)
    with silent_calls(receiver.grpc_target, 2 * WORKERS) as strangers:
        assert {code_of(call, timeout=10) for call in strangers} == {
            grpc.StatusCode.UNAUTHENTICATED
        }
        assert not one_export(receiver.grpc_target).HasField("partial_success")


def test_the_sdk_exporter_is_answered_while_strangers_hold_calls_open(
    receiving: Callable[..., Receiving],
) -> None:
    """The Python SDK's OTLP/gRPC exporter (its 10 s timeout), with the token, while 2 x WORKERS
    strangers hold silent calls open: its exports succeed."""
    receiver = receiving(grpc=True, token=TOKEN)
    with silent_calls(receiver.grpc_target, 2 * WORKERS):
        assert send_logs_grpc(receiver.grpc_target, agent_events(), authorization=f"Bearer {TOKEN}")


def test_a_call_whose_message_does_not_come_is_ended_at_its_bound(
    receiving: Callable[..., Receiving], caplog: pytest.LogCaptureFixture
) -> None:
    """With the token (or none configured), a call whose message is not whole within the bound
    of its headers (here 1 s; 30 s in the daemon, as OTLP/HTTP's) is ended DEADLINE_EXCEEDED,
    counted (refused, 408) and said in the log; the receiver answers others after (before: the
    calls waited for their message for ever)."""
    caplog.set_level(logging.WARNING, logger="watchdog")
    receiver = receiving(grpc=True, token=TOKEN, grpc_max_receive=1.0)
    with silent_calls(receiver.grpc_target, RECEIVING, AUTH) as held:
        assert {code_of(call) for call in held} == {grpc.StatusCode.DEADLINE_EXCEEDED}
        assert not one_export(receiver.grpc_target).HasField("partial_success")
    assert receiver.ingest.receiver.counts.refused.get(408) == RECEIVING
    assert any("did not send their request within" in r.getMessage() for r in caplog.records)


def test_past_the_calls_in_progress_a_call_is_told_when_to_come_back(
    receiving: Callable[..., Receiving],
) -> None:
    """MAX_CALLS calls in progress (silent ones, on a loopback receiver without a token; 64 made
    grpcio refuse calls before): one more is RESOURCE_EXHAUSTED with RetryInfo, which a Collector
    retries (before: grpcio's own "Concurrent RPC limit exceeded!", without it: dropped); the
    SDK exporter retries on it and succeeds once the silent calls are ended, each of them with
    an answer a Collector retries too. (Their turns are held for their whole bound here: a call
    gives its turn up after TURN_GRACE without its message, and then the new one would be let in.)"""
    receiver = receiving(grpc=True, grpc_max_receive=3.0, grpc_turn_grace=3.0)
    with silent_calls(receiver.grpc_target, max(MAX_CALLS, 64)) as held:
        with pytest.raises(grpc.RpcError) as caught:
            one_export(receiver.grpc_target, metadata=())
        error: Any = caught.value
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert retry_after_s(error) is not None
        assert collector_retries(error)
        assert send_logs_grpc(receiver.grpc_target, agent_events())  # retried within its 10 s
        for call in held:
            assert collector_retries(call.exception(timeout=30))


def collector_retries(error: Any) -> bool:
    """Whether the OpenTelemetry Collector's OTLP exporter sends a refused export again:
    its `shouldRetry` (exporter/otlpexporter/otlp.go) retries CANCELLED, DEADLINE_EXCEEDED,
    ABORTED, OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS, and RESOURCE_EXHAUSTED only with
    RetryInfo; anything else is a permanent error, the data dropped."""
    code = error.code()
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return retry_after_s(error) is not None
    return code in {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }


@pytest.mark.parametrize("stallers", [RECEIVING, 2 * RECEIVING])
def test_calls_with_the_token_that_send_nothing_hold_no_turn(
    receiving: Callable[..., Receiving], stallers: int
) -> None:
    """4 (or 8) calls with the token send their headers and never their message, each on a
    connection of its own, held for the whole 30 s bound: the Python SDK's exporter (its 10 s
    timeout, retrying on RetryInfo) gets all 4 of its exports in meanwhile (before: 1 of 4 with
    four, 2 of 4 with eight, and those only once the silent calls were cut at 30 s)."""
    receiver = receiving(grpc=True, token=TOKEN)
    with ExitStack() as held:
        for _ in range(stallers):
            held.enter_context(silent_calls(receiver.grpc_target, 1, AUTH))
        exports = [
            send_logs_grpc(receiver.grpc_target, agent_events(), authorization=f"Bearer {TOKEN}")
            for _ in range(4)
        ]
        assert exports == [True] * 4
        assert receiver.ingest.receiver.counts.refused.get(408) is None  # none was ended yet


class Late:
    """A request stream that sends its one message after `delay` seconds, then ends."""

    def __init__(self, message: bytes, delay: float) -> None:
        self.message, self.delay, self.sent = message, delay, False

    def __iter__(self) -> Late:
        return self

    def __next__(self) -> bytes:
        if self.sent:
            raise StopIteration
        time.sleep(self.delay)
        self.sent = True
        return self.message


def test_a_message_that_comes_after_its_turn_is_given_up_is_still_taken(
    receiving: Callable[..., Receiving],
) -> None:
    """A call whose message comes 3 x TURN_GRACE after its headers (a slow sender looks like a
    silent one until its message is whole) gives its turn up meanwhile, but is not ended: its
    message is taken and answered OK."""
    receiver = receiving(grpc=True, token=TOKEN)
    with grpc.insecure_channel(receiver.grpc_target) as channel:
        export = channel.stream_unary(EXPORT)
        late = Late(logs_request(2), 3 * TURN_GRACE)
        assert export(late, metadata=AUTH, timeout=10) == b""  # an empty ExportLogsServiceResponse
    assert receiver.ingest.receiver.counts.accepted["logs"] == 2


def test_with_every_reader_idle_a_new_call_ends_the_one_idle_longest(
    receiving: Callable[..., Receiving],
) -> None:
    """READERS calls whose message has not come, past their turn: a new call with its message
    is answered, and the call idle the longest is ended RESOURCE_EXHAUSTED with RetryInfo (a
    Collector sends it again); the others wait on for their message."""
    receiver = receiving(grpc=True, token=TOKEN)
    with ExitStack() as held:
        calls = []
        for _ in range(READERS):
            calls += held.enter_context(silent_calls(receiver.grpc_target, 1, AUTH))
            time.sleep(0.05)  # in this order
        deadline = time.monotonic() + 10
        while len(receiver.ingest._grpc.turns.readers) < READERS:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the silent calls never all got a turn"
            time.sleep(0.1)
        time.sleep(2 * TURN_GRACE)  # every one idle
        assert not one_export(receiver.grpc_target).HasField("partial_success")
        assert code_of(calls[0], timeout=5) is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert collector_retries(calls[0].exception())
        assert not any(call.done() for call in calls[1:])
