"""The receiver answers as the OTLP/HTTP specification says: encodings, partial success, each error."""

from __future__ import annotations

import gzip
import http.client
import json
import zlib
from collections.abc import Callable
from urllib.parse import urlsplit

from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from tests.ingest.conftest import Receiving
from watchdog.core.store import Store

PB = "application/x-protobuf"
JSON = "application/json"
T = 1_764_000_000_000_000_000  # 2025-11-24T16:00:00Z in ns


def logs_request(records: int = 3, *, trace_id: bytes = b"") -> bytes:
    """An ExportLogsServiceRequest of `records` log records, serialised."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    attribute = resource.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "agent"
    scope = resource.scope_logs.add()
    for i in range(records):
        record: LogRecord = scope.log_records.add()
        record.time_unix_nano = T + i
        record.event_name = "memory.recall.started"
        record.body.string_value = f"record {i}"
        if trace_id:
            record.trace_id = trace_id
    return bytes(request.SerializeToString())


# The OTLP/JSON example of the specification's shape: hex ids, string int64s, camelCase.
SPEC_JSON = {
    "resourceLogs": [
        {
            "resource": {
                "attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]
            },
            "scopeLogs": [
                {
                    "scope": {"name": "memory", "version": "1.0"},
                    "logRecords": [
                        {
                            "timeUnixNano": "1764000000000000000",
                            "observedTimeUnixNano": "1764000000000000123",
                            "severityNumber": 10,
                            "severityText": "Information",
                            "traceId": "5B8EFFF798038103D269B633813FC60C",
                            "spanId": "EEE19B7EC3C1B174",
                            "body": {"stringValue": "Example log record"},
                            "attributes": [
                                {"key": "session.id", "value": {"stringValue": "s1"}},
                                {"key": "result_count", "value": {"intValue": "3"}},
                                {"key": "latency_ms", "value": {"doubleValue": 812.0}},
                                {"key": "ok", "value": {"boolValue": True}},
                                {
                                    "key": "ids",
                                    "value": {"arrayValue": {"values": [{"stringValue": "a<b"}]}},
                                },
                            ],
                            "eventName": "memory.recall.completed",
                        }
                    ],
                }
            ],
        }
    ]
}


def post(
    endpoint: str,
    body: bytes,
    *,
    path: str = "/v1/logs",
    content_type: str = PB,
    method: str = "POST",
    **headers: str,
) -> http.client.HTTPResponse:
    parts = urlsplit(endpoint)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    connection.request(
        method,
        path,
        body=body,
        headers={
            "Content-Type": content_type,
            **{k.replace("_", "-"): v for k, v in headers.items()},
        },
    )
    return connection.getresponse()


def status_of(response: http.client.HTTPResponse) -> status_pb2.Status:
    status = status_pb2.Status()
    status.ParseFromString(response.read())
    return status


def test_protobuf_request_gets_an_empty_protobuf_response(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """200 with an ExportLogsServiceResponse without partial_success; the rows reach the table."""
    receiver = receiving()
    response = post(receiver.endpoint, logs_request(3))
    assert response.status == 200
    assert response.getheader("Content-Type") == PB
    message = ExportLogsServiceResponse.FromString(response.read())
    assert not message.HasField("partial_success")
    receiver.load()
    assert store.query(f"SELECT count() FROM {receiver.logs_table}").rows == [(3,)]


def test_json_request_as_the_specification_writes_it_is_accepted(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """OTLP/JSON (hex ids, int64 as strings, camelCase) is stored field by field as the exporter does."""
    receiver = receiving()
    response = post(receiver.endpoint, json.dumps(SPEC_JSON).encode(), content_type=JSON)
    assert response.status == 200
    assert response.getheader("Content-Type") == JSON
    assert json.loads(response.read()) == {}
    receiver.load()
    row = store.query(
        "SELECT toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, SeverityText, SeverityNumber,"
        " ServiceName, Body, ScopeName, ScopeVersion, LogAttributes, EventName"
        f" FROM {receiver.logs_table}"
    ).rows
    assert row == [
        (
            1_764_000_000_000_000_000,
            "5b8efff798038103d269b633813fc60c",
            "eee19b7ec3c1b174",
            "Information",
            10,
            "agent",
            "Example log record",
            "memory",
            "1.0",
            {
                "session.id": "s1",
                "result_count": "3",
                "latency_ms": "812",
                "ok": "true",
                "ids": '["a\\u003cb"]',
            },
            "memory.recall.completed",
        )
    ]


def test_traces_path_answers_with_a_trace_response(receiving: Callable[..., Receiving]) -> None:
    """POST /v1/traces with an empty request: 200 and an ExportTraceServiceResponse."""
    receiver = receiving()
    response = post(receiver.endpoint, b"", path="/v1/traces")
    assert response.status == 200
    assert not ExportTraceServiceResponse.FromString(response.read()).HasField("partial_success")


def test_gzip_and_deflate_bodies_are_decompressed(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Content-Encoding gzip and deflate are read; the same records sent twice are stored once."""
    receiver = receiving()
    body = logs_request(4)
    assert post(receiver.endpoint, gzip.compress(body), Content_Encoding="gzip").status == 200
    assert post(receiver.endpoint, zlib.compress(body), Content_Encoding="deflate").status == 200
    receiver.load()
    assert store.query(f"SELECT count() FROM {receiver.logs_table}").rows == [(4,)]
    assert receiver.ingest.receiver.counts.retried["logs"] == 1


def test_partial_success_names_the_rejected_records(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Records with a malformed trace id are rejected alone: 200, partial_success, the rest stored."""
    receiver = receiving()
    request = ExportLogsServiceRequest.FromString(logs_request(2))
    bad = request.resource_logs[0].scope_logs[0].log_records.add()
    bad.trace_id = b"\x01" * 5
    response = post(receiver.endpoint, request.SerializeToString())
    assert response.status == 200
    partial = ExportLogsServiceResponse.FromString(response.read()).partial_success
    assert partial.rejected_log_records == 1
    assert "trace_id" in partial.error_message
    receiver.load()
    assert store.query(f"SELECT count() FROM {receiver.logs_table}").rows == [(2,)]


def test_partial_success_in_json_for_a_json_request(receiving: Callable[..., Receiving]) -> None:
    """A JSON request gets its partial_success in JSON; a malformed hex id is the rejected record."""
    receiver = receiving()
    document = json.loads(json.dumps(SPEC_JSON))
    document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["traceId"] = "not-hex"
    response = post(receiver.endpoint, json.dumps(document).encode(), content_type=JSON)
    assert response.status == 200
    assert json.loads(response.read())["partialSuccess"]["rejectedLogRecords"] == "1"


def test_malformed_protobuf_is_400_with_a_status_body(receiving: Callable[..., Receiving]) -> None:
    """A body that is not an ExportLogsServiceRequest: 400 and a google.rpc.Status saying so."""
    response = post(receiving().endpoint, b"\xff\xff\xff\xff not protobuf")
    assert response.status == 400
    assert "ExportLogsServiceRequest" in status_of(response).message


def test_malformed_json_is_400(receiving: Callable[..., Receiving]) -> None:
    """JSON that is not a request of the signal (or not JSON at all): 400, the Status in JSON."""
    receiver = receiving()
    for body in (b"{not json", b'{"resourceLogs": "nope"}', b"[]"):
        response = post(receiver.endpoint, body, content_type=JSON)
        assert response.status == 400
        assert json.loads(response.read())["message"]


def test_unknown_content_type_is_415(receiving: Callable[..., Receiving]) -> None:
    """Neither application/x-protobuf nor application/json: 415."""
    response = post(receiving().endpoint, b"hello", content_type="text/plain")
    assert response.status == 415


def test_unknown_content_encoding_is_415(receiving: Callable[..., Receiving]) -> None:
    """An encoding other than gzip, deflate or identity: 415."""
    response = post(receiving().endpoint, b"x", Content_Encoding="br")
    assert response.status == 415


def test_body_over_the_limit_is_413(receiving: Callable[..., Receiving]) -> None:
    """A Content-Length over ingest.max_body: 413, and the body is never read."""
    receiver = receiving(max_body=1024)
    response = post(receiver.endpoint, b"\0" * 4096)
    assert response.status == 413


def test_body_decompressing_over_the_limit_is_413(receiving: Callable[..., Receiving]) -> None:
    """A small gzip body that inflates past ingest.max_body: 413, decompression stops at the limit."""
    receiver = receiving(max_body=64 * 1024)
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))
    response = post(receiver.endpoint, bomb, Content_Encoding="gzip")
    assert response.status == 413


def test_broken_gzip_is_400(receiving: Callable[..., Receiving]) -> None:
    """A gzip body that is not gzip: 400."""
    response = post(receiving().endpoint, b"not gzip at all", Content_Encoding="gzip")
    assert response.status == 400


def test_too_many_records_is_413(receiving: Callable[..., Receiving]) -> None:
    """More records in one request than ingest.max_records: 413, nothing stored."""
    receiver = receiving(max_records=5)
    response = post(receiver.endpoint, logs_request(6))
    assert response.status == 413
    assert "records" in status_of(response).message


def test_other_path_is_404_and_other_method_405(receiving: Callable[..., Receiving]) -> None:
    """Only POST /v1/logs and /v1/traces exist (metrics are not received)."""
    receiver = receiving()
    assert post(receiver.endpoint, b"", path="/v1/metrics").status == 404
    assert post(receiver.endpoint, b"", method="GET").status == 405


def test_full_queue_is_429_with_retry_after(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """More accepted than ingest.max_queued and not yet loaded: 429 with Retry-After; loading frees it."""
    receiver = receiving(max_queued=100)
    assert post(receiver.endpoint, logs_request(3)).status == 200
    refused = post(receiver.endpoint, logs_request(4))
    assert refused.status == 429
    assert refused.getheader("Retry-After") == "1"
    receiver.load()
    assert post(receiver.endpoint, logs_request(4)).status == 200


def test_stopping_receiver_answers_503_with_retry_after(
    receiving: Callable[..., Receiving],
) -> None:
    """While the daemon stops, a request is told to come back (503, Retry-After)."""
    receiver = receiving()
    assert receiver.ingest.admission() is None
    receiver.ingest.refuse_new()
    response = post(receiver.endpoint, logs_request(1))
    assert response.status == 503
    assert response.getheader("Retry-After") == "1"


def test_bearer_token_is_required_when_configured(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """With ingest.token: no or a wrong bearer token is 401; the right one is 200."""
    receiver = receiving(token="s3cret-token")
    assert post(receiver.endpoint, logs_request(1)).status == 401
    wrong = post(receiver.endpoint, logs_request(1), Authorization="Bearer s3cret-tokeN")
    assert wrong.status == 401
    assert wrong.getheader("WWW-Authenticate", "").startswith("Bearer")
    right = post(receiver.endpoint, logs_request(1), Authorization="Bearer s3cret-token")
    assert right.status == 200
