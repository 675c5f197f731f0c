"""What a crafted protobuf body costs before it is refused: the wire walks stop early, whatever the bytes.

A gzip body of 15 KB can decompress to 15 MiB of zeros, or of millions of
two-byte fields no OTLP message has: walking them a field at a time in
Python cost about 3 s of CPU per request (issue 32, finding 13). Zeros are
field number 0, which protobuf does not allow; any other run of fields is
bounded by what `max_records` records may hold. The CPU each costs now is
measured in docs/performance.md#the-receiver-under-abuse, never timed here.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.ingest.conftest import Receiving
from tests.ingest.test_receiver import logs_request, post
from watchdog.daemon.ingest.wire import Malformed, TooMany, protobuf_messages, protobuf_records

SIZE = 15 * 1024 * 1024
LIMIT = 50_000  # the default max_records
REQUEST = ExportLogsServiceRequest.DESCRIPTOR


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: key, length, payload."""
    out, size = bytearray([number << 3 | 2]), len(payload)
    while True:
        if size >> 7:
            out.append(size & 0x7F | 0x80)
            size >>= 7
        else:
            out.append(size)
            return bytes(out) + payload


ZEROS_IN_RESOURCE_LOGS = field(1, bytes(SIZE))
VARINTS_IN_RESOURCE_LOGS = field(1, b"\x08\x00" * (SIZE // 2))  # field 1, a varint 0, repeated
EMPTY_FIELDS_IN_A_RECORD = field(1, field(2, field(2, b"\x0a\x00" * (SIZE // 2))))


def test_a_zero_filled_field_is_malformed_at_its_first_byte() -> None:
    """Zeros inside resource_logs are field number 0, which protobuf has not: Malformed at once
    (before: walked to the end as 7.8 million varint fields, then refused by the decoder)."""
    with pytest.raises(Malformed, match="field number 0"):
        protobuf_records(ZEROS_IN_RESOURCE_LOGS, LIMIT)


def test_millions_of_unknown_fields_around_the_records_are_too_many() -> None:
    """7.8 million varint fields inside resource_logs (OTLP has none there; protobuf keeps them
    as unknown): the records walk stops once it has seen more fields than `max_records`
    records may come with (before: walked all of them, then stored an empty request)."""
    with pytest.raises(TooMany, match="fields"):
        protobuf_records(VARINTS_IN_RESOURCE_LOGS, LIMIT)


def test_millions_of_empty_fields_inside_a_record_are_too_many() -> None:
    """7.8 million empty fields inside one log record: the records walk finds one record, and
    the messages walk stops once it has seen more fields than the records may hold (before: it
    walked every one)."""
    assert protobuf_records(EMPTY_FIELDS_IN_A_RECORD, LIMIT) == 1
    with pytest.raises(TooMany, match="fields"):
        protobuf_messages(EMPTY_FIELDS_IN_A_RECORD, REQUEST, LIMIT)


@pytest.mark.parametrize(
    "body",
    [ZEROS_IN_RESOURCE_LOGS, VARINTS_IN_RESOURCE_LOGS, EMPTY_FIELDS_IN_A_RECORD],
    ids=["zeros", "varints", "empty-fields"],
)
def test_a_crafted_gzip_body_is_refused_and_nothing_is_stored(
    receiving: Callable[..., Receiving], body: bytes
) -> None:
    """Each of them, gzip-compressed to about 15 KB and posted: 400 or 413, nothing spooled,
    and the receiver answers the next request."""
    receiver = receiving()
    compressed = gzip.compress(body)
    assert len(compressed) < 64 * 1024
    answer = post(receiver.endpoint, compressed, Content_Encoding="gzip")
    assert answer.status in (400, 413)
    assert receiver.ingest.spool.queued_bytes == 0
    assert post(receiver.endpoint, logs_request(2)).status == 200


@pytest.mark.slow
def test_a_legitimate_request_at_the_record_limit_is_walked_whole() -> None:
    """The bounds leave real requests alone: max_records records, each with ten attributes,
    are counted exactly by both walks."""
    body = _legitimate_request()
    assert protobuf_records(body, LIMIT) == LIMIT
    assert protobuf_messages(body, REQUEST, LIMIT) > LIMIT


def _legitimate_request() -> bytes:
    request = ExportLogsServiceRequest.FromString(logs_request(1))
    records = request.resource_logs[0].scope_logs[0].log_records
    template = records[0]
    for i in range(10):
        attribute = template.attributes.add()
        attribute.key, attribute.value.string_value = f"key.{i}", f"value-{i:02}"
    for _ in range(LIMIT - 1):
        records.add().CopyFrom(template)
    return bytes(request.SerializeToString())


if __name__ == "__main__":  # the CPU each walk takes (docs/performance.md), one process
    import time

    cases = {
        "15 MiB of zeros inside resource_logs": ZEROS_IN_RESOURCE_LOGS,
        "7.8 million varint fields inside resource_logs": VARINTS_IN_RESOURCE_LOGS,
        "7.8 million empty fields inside one log record": EMPTY_FIELDS_IN_A_RECORD,
        "50,000 records of ten attributes (legitimate)": _legitimate_request(),
    }
    for name, body in cases.items():
        started = time.process_time()
        try:
            protobuf_records(body, LIMIT)
            protobuf_messages(body, REQUEST, LIMIT)
            outcome = "walked whole"
        except (Malformed, TooMany) as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        spent = time.process_time() - started
        print(f"{name} ({len(body) / 2**20:.1f} MiB): {spent:.2f} s of CPU, {outcome}")
