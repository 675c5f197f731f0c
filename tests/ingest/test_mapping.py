"""Each OTLP field lands in the column the Collector's ClickHouse exporter puts it in, mapped as it maps it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from checks.source_ddl import EXPORTER_OTEL_LOGS, EXPORTER_OTEL_TRACES, OTEL_LOGS, OTEL_TRACES
from tests.ingest.conftest import Receiving
from tests.ingest.test_receiver import T, post
from watchdog.core.store import Store
from watchdog.daemon.ingest.logs import COLUMNS as LOG_COLUMNS
from watchdog.daemon.ingest.traces import COLUMNS as SPAN_COLUMNS


def _kv(key: str, text: str) -> KeyValue:
    pair = KeyValue(key=key)
    pair.value.string_value = text
    return pair


def _row(store: Store, table: str, columns: str) -> tuple[Any, ...]:
    rows = store.query(f"SELECT {columns} FROM {table}").rows
    assert len(rows) == 1, rows
    return rows[0]


def _columns(store: Store, ddl: str) -> dict[str, str]:
    """The columns a DDL creates, read back from the store."""
    table = f"t_ddl_{abs(hash(ddl)) % 10**8}.t"
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(f"DROP TABLE IF EXISTS {table}")
    store.command(ddl.format(table=table, settings=""))
    return store.table_columns(table)


def _written(store: Store, ddl: str) -> set[str]:
    """The columns of a DDL's table an insert writes: not those the server computes."""
    _columns(store, ddl)
    table = f"t_ddl_{abs(hash(ddl)) % 10**8}"
    rows = store.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = 't'"
        " AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')",
        {"db": table},
    ).rows
    return {str(name) for (name,) in rows}


def test_created_tables_have_the_exporter_columns(store: Store) -> None:
    """The tables the receiver creates have the very columns (and types) of the exporter's layout."""
    assert _columns(store, EXPORTER_OTEL_LOGS) == _columns(store, OTEL_LOGS)
    assert _columns(store, EXPORTER_OTEL_TRACES) == _columns(store, OTEL_TRACES)


def test_the_receiver_writes_every_column_the_server_does_not_compute(store: Store) -> None:
    """Each log and span row fills every column but the exporter's MATERIALIZED and ALIAS ones."""
    assert set(LOG_COLUMNS) == _written(store, OTEL_LOGS)
    assert set(SPAN_COLUMNS) == _written(store, OTEL_TRACES)


def test_log_record_fields_as_the_exporter_maps_them(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Observed time when the time is unset, hex ids, flags' low byte, service.name, scope, EventName."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add(schema_url="https://opentelemetry.io/schemas/1.24.0")
    resource.resource.attributes.extend([_kv("service.name", "agent"), _kv("host.name", "h1")])
    scope = resource.scope_logs.add(schema_url="https://scope/1")
    scope.scope.name, scope.scope.version = "memory", "2.1"
    scope.scope.attributes.append(_kv("library", "mem"))
    record = scope.log_records.add(
        observed_time_unix_nano=T + 123_456_789,
        trace_id=bytes(range(16)),
        span_id=bytes(range(8, 16)),
        flags=0x301,
        severity_number=17,
        severity_text="ERROR",
        event_name="memory.observe.failed",
    )
    record.body.kvlist_value.values.append(_kv("why", "timeout"))
    record.attributes.append(_kv("session.id", "s1"))
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString()).status == 200
    receiver.load()
    assert _row(
        store,
        receiver.logs_table,
        ", ".join(LOG_COLUMNS).replace("Timestamp", "toUnixTimestamp64Nano(Timestamp)", 1),
    ) == (
        T + 123_456_789,
        "000102030405060708090a0b0c0d0e0f",
        "08090a0b0c0d0e0f",
        1,
        "ERROR",
        17,
        '{"why":"timeout"}',
        {"session.id": "s1"},
        "memory.observe.failed",
        "agent",
        "https://opentelemetry.io/schemas/1.24.0",
        {"service.name": "agent", "host.name": "h1"},
        "https://scope/1",
        "memory",
        "2.1",
        {"library": "mem"},
    )


def test_unset_ids_and_non_string_service_name_are_empty(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """All-zero ids are stored as "", and a service.name that is not a string gives no ServiceName."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    name = resource.resource.attributes.add(key="service.name")
    name.value.int_value = 7
    resource.scope_logs.add().log_records.add(
        time_unix_nano=T, trace_id=b"\0" * 16, span_id=b"\0" * 8
    )
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString()).status == 200
    receiver.load()
    assert _row(store, receiver.logs_table, "TraceId, SpanId, ServiceName, ResourceAttributes") == (
        "",
        "",
        "",
        {"service.name": "7"},
    )


def test_log_record_past_2262_is_rejected(receiving: Callable[..., Receiving]) -> None:
    """A time DateTime64(9) cannot hold is rejected alone (partial success), never loaded."""
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    records.add(time_unix_nano=2**64 - 1)
    records.add(time_unix_nano=T)
    receiver = receiving()
    response = post(receiver.endpoint, request.SerializeToString())
    assert response.status == 200
    assert receiver.ingest.receiver.counts.rejected["logs"] == 1
    assert receiver.ingest.receiver.counts.accepted["logs"] == 1


def _span(**fields: Any) -> Span:
    span = Span(
        trace_id=bytes(range(16)),
        span_id=bytes(range(8)),
        name="memory.recall",
        start_time_unix_nano=T,
        end_time_unix_nano=T + 1_500_000,
    )
    for key, item in fields.items():
        setattr(span, key, item)
    return span


def test_span_fields_as_the_exporter_maps_them(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Start as Timestamp, Duration in ns, kind and status names, events and links as nested columns."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.append(_kv("service.name", "agent"))
    scope = resource.scope_spans.add()
    scope.scope.name, scope.scope.version = "memory", "1.0"
    span = _span(
        parent_span_id=bytes(range(1, 9)),
        trace_state="k=v",
        kind=Span.SPAN_KIND_CLIENT,
    )
    span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message="boom"))
    span.attributes.append(_kv("session.id", "s1"))
    event = span.events.add(time_unix_nano=T + 1000, name="retry")
    event.attributes.append(_kv("attempt", "2"))
    link = span.links.add(trace_id=bytes(16 * [1]), span_id=bytes(8 * [2]), trace_state="a=b")
    link.attributes.append(_kv("why", "caused by"))
    scope.spans.append(span)
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString(), path="/v1/traces").status == 200
    receiver.load()
    columns = ", ".join(SPAN_COLUMNS).replace("Timestamp", "toUnixTimestamp64Nano(Timestamp)", 1)
    columns = columns.replace(
        "Events.Timestamp", "arrayMap(x -> toUnixTimestamp64Nano(x), Events.Timestamp)"
    )
    assert _row(store, receiver.traces_table, columns) == (
        T,
        "000102030405060708090a0b0c0d0e0f",
        "0001020304050607",
        "0102030405060708",
        "k=v",
        "memory.recall",
        "Client",
        {"session.id": "s1"},
        1_500_000,
        "Error",
        "boom",
        [T + 1000],
        ["retry"],
        [{"attempt": "2"}],
        ["01" * 16],
        ["02" * 8],
        ["a=b"],
        [{"why": "caused by"}],
        "agent",
        {"service.name": "agent"},
        "memory",
        "1.0",
    )


def test_unset_kind_and_status_names(store: Store, receiving: Callable[..., Receiving]) -> None:
    """A span with no kind and no status: `Unspecified` and `Unset`, as pdata names them."""
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(_span())
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString(), path="/v1/traces").status == 200
    receiver.load()
    assert _row(store, receiver.traces_table, "SpanKind, StatusCode, ParentSpanId") == (
        "Unspecified",
        "Unset",
        "",
    )


def test_malformed_spans_are_rejected_alone(receiving: Callable[..., Receiving]) -> None:
    """A span ending before it starts, or with a parent id of the wrong length, is rejected; the rest kept."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    spans.append(_span(end_time_unix_nano=T - 1))
    spans.append(_span(parent_span_id=b"\1\2\3"))
    spans.append(_span())
    receiver = receiving()
    response = post(receiver.endpoint, request.SerializeToString(), path="/v1/traces")
    partial = ExportTraceServiceResponse.FromString(response.read()).partial_success
    assert (response.status, partial.rejected_spans) == (200, 2)
    assert partial.error_message == "a span ends before it starts"
