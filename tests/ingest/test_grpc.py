"""OTLP/gRPC: the generated LogsService and TraceService stubs against the receiver, each answer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from tests.ingest.conftest import Receiving
from tests.ingest.test_receiver import T, logs_request
from watchdog.core.store import Store
from watchdog.daemon.ingest.otlp_grpc import retry_after_s


def count(store: Store, table: str) -> int:
    return int(store.query(f"SELECT count() FROM {table}").rows[0][0])


@contextmanager
def channel(receiver: Receiving) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(receiver.grpc_target) as opened:
        yield opened


def logs(body: bytes) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest.FromString(body)


def refused(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_logs_and_spans_exported_over_grpc_are_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """LogsService/Export and TraceService/Export, plain and gzip: OK, and the rows are stored
    as over OTLP/HTTP (the same records twice are kept once)."""
    receiver = receiving(grpc=True)
    spans = ExportTraceServiceRequest()
    span = spans.resource_spans.add().scope_spans.add().spans.add(name="memory.recall")
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    span.start_time_unix_nano, span.end_time_unix_nano = T, T + 5
    with channel(receiver) as opened:
        answer = LogsServiceStub(opened).Export(logs(logs_request(3)), timeout=30)
        assert not answer.HasField("partial_success")
        again = LogsServiceStub(opened).Export(
            logs(logs_request(3)), timeout=30, compression=grpc.Compression.Gzip
        )
        assert not again.HasField("partial_success")
        assert not TraceServiceStub(opened).Export(spans, timeout=30).HasField("partial_success")
    receiver.load()
    assert count(store, receiver.logs_table) == 3
    assert count(store, receiver.traces_table) == 1
    assert receiver.ingest.receiver.counts.retried["logs"] == 1


def test_rejected_records_are_a_partial_success(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A record the store could not hold is rejected alone: OK with partial_success."""
    receiver = receiving(grpc=True)
    request = logs(logs_request(2))
    request.resource_logs[0].scope_logs[0].log_records.add().trace_id = b"\x01" * 5
    with channel(receiver) as opened:
        partial = LogsServiceStub(opened).Export(request, timeout=30).partial_success
    assert partial.rejected_log_records == 1
    assert "trace_id" in partial.error_message
    receiver.load()
    assert count(store, receiver.logs_table) == 2


def test_the_bearer_token_travels_in_the_metadata(receiving: Callable[..., Receiving]) -> None:
    """With ingest.token: no or a wrong `authorization` metadata is UNAUTHENTICATED."""
    receiver = receiving(grpc=True, token="s3cret-token")
    with channel(receiver) as opened:
        stub = LogsServiceStub(opened)
        for metadata in ((), (("authorization", "Bearer s3cret-tokeN"),)):
            error = refused(lambda m=metadata: stub.Export(logs(logs_request(1)), metadata=m))
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        stub.Export(logs(logs_request(1)), metadata=(("authorization", "Bearer s3cret-token"),))


def test_limits_are_resource_exhausted_without_retry_info(
    receiving: Callable[..., Receiving],
) -> None:
    """Too many records, or a message past max_body once decompressed: RESOURCE_EXHAUSTED with no
    RetryInfo (the same request will never fit); a malformed one INVALID_ARGUMENT."""
    receiver = receiving(grpc=True, max_records=5, max_body=64 * 1024)
    with channel(receiver) as opened:
        stub = LogsServiceStub(opened)
        error = refused(lambda: stub.Export(logs(logs_request(6)), timeout=30))
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "records" in (error.details() or "") and retry_after_s(error) is None
        big = logs(logs_request(1))
        big.resource_logs[0].scope_logs[0].log_records[0].body.string_value = "x" * 100_000
        error = refused(lambda: stub.Export(big, timeout=30, compression=grpc.Compression.Gzip))
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert retry_after_s(error) is None
        raw = opened.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        error = refused(lambda: raw(b"\xff\xff\xff\xff not protobuf", timeout=30))
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert receiver.ingest.spool.queued_bytes == 0


def test_backpressure_says_when_to_come_back(receiving: Callable[..., Receiving]) -> None:
    """More queued than max_queued: RESOURCE_EXHAUSTED with RetryInfo; while stopping:
    UNAVAILABLE with RetryInfo; loading makes room again."""
    receiver = receiving(grpc=True, max_queued=100)
    with channel(receiver) as opened:
        stub = LogsServiceStub(opened)
        stub.Export(logs(logs_request(3)), timeout=30)
        error = refused(lambda: stub.Export(logs(logs_request(4)), timeout=30))
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert retry_after_s(error) == 1.0
        receiver.load()
        stub.Export(logs(logs_request(4)), timeout=30)
        receiver.ingest.refuse_new()
        error = refused(lambda: stub.Export(logs(logs_request(5)), timeout=30))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert retry_after_s(error) == 1.0
