"""The traces signal: `POST /v1/traces`, `TraceService/Export`, rows of the exporter's `otel_traces` (docs/sources.md).

Each span is one row, mapped as the Collector's ClickHouse exporter maps it:
`Timestamp` the span's start, `Duration` end minus start in nanoseconds,
`SpanKind` `Internal`, `Server`, ..., `StatusCode` `Unset`, `Ok` or
`Error`, the span's events and links as the nested columns. A span the
store could not hold (an id of the wrong length, a time past 2262, an end
before its start) is rejected alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

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
)
from watchdog.daemon.ingest.values import attributes

COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "TraceState",
    "SpanName",
    "SpanKind",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "ScopeVersion",
)
REQUEST = trace_service_pb2.ExportTraceServiceRequest
RESPONSE = trace_service_pb2.ExportTraceServiceResponse
SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
# pdata's names of the span kinds and status codes (what the exporter writes).
SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")


def rows(request: Any, reject: Callable[[str], None]) -> Iterator[str]:
    """One JSONCompactEachRow line per span, in COLUMNS order; `reject` says why not."""
    for resource_spans in request.resource_spans:
        resource = resource_spans.resource
        res_attrs = attributes(resource.attributes)
        service = service_name(resource)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            shared = shared_columns([service, res_attrs, scope.name, scope.version])
            for span in scope_spans.spans:
                problem = _problem(span)
                if problem:
                    reject(problem)
                    continue
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                kind, code = span.kind, span.status.code
                events, links = span.events, span.links
                head = [
                    hex_id(span.trace_id, NO_TRACE),
                    hex_id(span.span_id, NO_SPAN),
                    hex_id(span.parent_span_id, NO_SPAN),
                    span.trace_state,
                    span.name,
                    SPAN_KINDS[kind] if 0 <= kind < len(SPAN_KINDS) else "",
                    attributes(span.attributes),
                    end - start,
                    STATUS_CODES[code] if 0 <= code < len(STATUS_CODES) else "",
                    span.status.message,
                ]
                tail = [
                    [e.name for e in events],
                    [attributes(e.attributes) for e in events],
                    [hex_id(link.trace_id, NO_TRACE) for link in links],
                    [hex_id(link.span_id, NO_SPAN) for link in links],
                    [link.trace_state for link in links],
                    [attributes(link.attributes) for link in links],
                ]
                times = ",".join(nanos(e.time_unix_nano) for e in events)
                yield (
                    f"[{nanos(start)},{json_text(head)[1:-1]},[{times}],"
                    f"{json_text(tail)[1:-1]},{shared}]\n"
                )


def _problem(span: Any) -> str:
    """Why the store could not hold the span as the exporter writes it; "" when it can."""
    if not ids_fit(span.trace_id, span.span_id):
        return "a span has a trace_id or span_id of the wrong length"
    if len(span.parent_span_id) not in (0, 8):
        return "a span has a parent_span_id of the wrong length"
    if not all(ids_fit(link.trace_id, link.span_id) for link in span.links):
        return "a span link has a trace_id or span_id of the wrong length"
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if end > MAX_NANOS or any(e.time_unix_nano > MAX_NANOS for e in span.events):
        return "a span's time is past 2262 (DateTime64(9) ends there)"
    if end < start:
        return "a span ends before it starts"
    return ""


def reject_count(partial: Any, rejected: int) -> None:
    """Write how many spans were rejected into a response's partial_success."""
    partial.rejected_spans = rejected
