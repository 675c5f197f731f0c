"""The logs signal: `POST /v1/logs`, `LogsService/Export`, rows of the exporter's `otel_logs` (docs/sources.md).

Each log record is one row, mapped as the Collector's ClickHouse exporter
maps it: `Timestamp` the record's time, else its observed time; `TraceId`,
`SpanId` in lower-case hex ("" when unset); `TraceFlags` the flags' low
byte; `SeverityText`, `SeverityNumber`; `ServiceName` the resource's
`service.name` (when a string); `Body` as a string; the resource's and the
scope's schema URLs, the scope's name and version; resource, scope and
record attributes as string maps (`ingest.values`); `EventName`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from watchdog.daemon.ingest.rows import (
    MAX_NANOS,
    NO_SPAN,
    NO_TRACE,
    hex_id,
    ids_fit,
    json_text,
    nanos,
    service_name,
    shared_columns,
    text,
)
from watchdog.daemon.ingest.values import as_string, attributes

# The columns in the order each row carries them: a record's own fields first, then those
# of its resource and scope, which are serialised once per scope.
COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "TraceFlags",
    "SeverityText",
    "SeverityNumber",
    "Body",
    "LogAttributes",
    "EventName",
    "ServiceName",
    "ResourceSchemaUrl",
    "ResourceAttributes",
    "ScopeSchemaUrl",
    "ScopeName",
    "ScopeVersion",
    "ScopeAttributes",
)
REQUEST = logs_service_pb2.ExportLogsServiceRequest
RESPONSE = logs_service_pb2.ExportLogsServiceResponse
SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name


def rows(request: Any, reject: Callable[[str], None]) -> Iterator[str]:
    """One JSONCompactEachRow line per log record, in COLUMNS order; `reject` says why not."""
    for resource_logs in request.resource_logs:
        resource = resource_logs.resource
        res_attrs = attributes(resource.attributes)
        service, res_url = service_name(resource), resource_logs.schema_url
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            shared = shared_columns(
                [
                    service,
                    res_url,
                    res_attrs,
                    scope_logs.schema_url,
                    scope.name,
                    scope.version,
                    attributes(scope.attributes),
                ]
            )
            for record in scope_logs.log_records:
                trace_id, span_id = record.trace_id, record.span_id
                if not ids_fit(trace_id, span_id):
                    reject("a log record has a trace_id or span_id of the wrong length")
                    continue
                ts = record.time_unix_nano or record.observed_time_unix_nano
                if ts > MAX_NANOS:
                    reject("a log record's time is past 2262 (DateTime64(9) ends there)")
                    continue
                body = record.body
                yield (
                    f'[{nanos(ts)},"{hex_id(trace_id, NO_TRACE)}","{hex_id(span_id, NO_SPAN)}",'
                    f"{record.flags & 0xFF},{text(record.severity_text)},"
                    f"{record.severity_number & 0xFF},"
                    f"{text(body.string_value or as_string(body))},"
                    f"{json_text(attributes(record.attributes))},{text(record.event_name)},"
                    f"{shared}]\n"
                )


def reject_count(partial: Any, rejected: int) -> None:
    """Write how many records were rejected into a response's partial_success."""
    partial.rejected_log_records = rejected
