"""OTLP/HTTP requests to rows of the exporter's `otel_logs` and `otel_traces` tables.

A request body, protobuf (`application/x-protobuf`) or JSON
(`application/json`, ids in hex as the OTLP specification writes them), is
decoded with the `opentelemetry-proto` classes; each log record or span
becomes one row, its fields mapped as the OpenTelemetry Collector's
ClickHouse exporter maps them:

- logs: `Timestamp` the record's time, else its observed time; `TraceId`,
  `SpanId` in lower-case hex ("" when unset); `TraceFlags` the flags' low
  byte; `SeverityText`, `SeverityNumber`; `ServiceName` the resource's
  `service.name` (when a string); `Body` as a string; the resource's and the
  scope's schema URLs, the scope's name and version; resource, scope and
  record attributes as string maps (watchdog.daemon.ingest.values);
  `EventName` the record's event name;
- traces: `Timestamp` the span's start, `Duration` end minus start in
  nanoseconds, `SpanKind` `Internal`, `Server`, ..., `StatusCode` `Unset`,
  `Ok` or `Error`, the span's events and links as the nested columns.

A record the store could not hold is rejected alone (OTLP's partial
success): an id of the wrong length, a time past what DateTime64(9) holds
(2262), a span that ends before it starts. The rows are serialised once,
as ClickHouse's `JSONCompactEachRow` (the loader inserts them unchanged),
and their digest names the batch: the same records sent again are the same
batch (watchdog.daemon.ingest.spool keeps them once).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from watchdog.daemon.ingest.values import as_string, attributes

LOGS = "logs"
TRACES = "traces"
SIGNALS = (LOGS, TRACES)

# The columns in the order each row carries them: a record's own fields first, then those
# of its resource and scope, which are serialised once per scope (see `_log_lines`).
LOG_COLUMNS = (
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
SPAN_COLUMNS = (
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
COLUMNS = {LOGS: LOG_COLUMNS, TRACES: SPAN_COLUMNS}

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# DateTime64(9) ends at 2262-04-11T23:47:16.854775807Z, the largest signed 64-bit count of ns.
MAX_NANOS = 2**63 - 1
_NO_TRACE = "0" * 32
_NO_SPAN = "0" * 16
# pdata's names of the span kinds and status codes (what the exporter writes).
SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")


class BadRequest(Exception):
    """The body is not an OTLP request of this signal and encoding (HTTP 400)."""


@dataclass(frozen=True)
class Batch:
    """One request's accepted records, as rows ready for the store."""

    signal: str
    data: bytes  # the rows, JSONCompactEachRow in COLUMNS[signal] order ("" when none)
    rows: int
    rejected: int = 0
    problem: str = ""  # why the first rejected record was rejected

    @property
    def digest(self) -> str:
        """What names the batch: the same records make the same digest, whatever the encoding."""
        return hashlib.sha256(self.signal.encode() + b"\n" + self.data).hexdigest()[:40]


def new_request(signal: str) -> ExportLogsServiceRequest | ExportTraceServiceRequest:
    return ExportLogsServiceRequest() if signal == LOGS else ExportTraceServiceRequest()


def decode(signal: str, body: bytes, content_type: str) -> Any:
    """The request message of `signal` in `body`; BadRequest when it is not one."""
    request = new_request(signal)
    if content_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError) as exc:
            raise BadRequest(f"not a protobuf {type(request).__name__}: {exc}") from None
        return request
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"not JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("not an OTLP/JSON request: nested too deep") from None
    if not isinstance(document, dict):
        raise BadRequest(f"not an OTLP/JSON {type(request).__name__}: not an object")
    try:
        _hex_ids_to_base64(document, signal)
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise BadRequest(f"not an OTLP/JSON {type(request).__name__}: {exc}") from None
    except RecursionError:
        raise BadRequest(f"not an OTLP/JSON {type(request).__name__}: nested too deep") from None
    return request


def count_records(signal: str, request: Any) -> int:
    """Log records or spans in the request."""
    if signal == LOGS:
        return sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def to_batch(signal: str, request: Any) -> Batch:
    """The request's records as rows, the rejected ones counted with the first reason."""
    mapper = _log_lines if signal == LOGS else _span_lines
    rejections: list[str] = []
    lines = list(mapper(request, rejections.append))
    return Batch(
        signal=signal,
        data="".join(lines).encode(),
        rows=len(lines),
        rejected=len(rejections),
        problem=rejections[0] if rejections else "",
    )


def response(signal: str, batch: Batch | None, content_type: str) -> bytes:
    """The Export*ServiceResponse, serialised, with a partial success when records were rejected."""
    message = response_message(signal, batch)
    if content_type == JSON:
        return str(json_format.MessageToJson(message, indent=None)).encode()
    return bytes(message.SerializeToString())


def response_message(signal: str, batch: Batch | None) -> Any:
    """The Export*ServiceResponse, with a partial success when records were rejected."""
    message: Any = ExportLogsServiceResponse() if signal == LOGS else ExportTraceServiceResponse()
    if batch is not None and batch.rejected:
        partial = message.partial_success
        if signal == LOGS:
            partial.rejected_log_records = batch.rejected
        else:
            partial.rejected_spans = batch.rejected
        partial.error_message = batch.problem
    return message


# -- mapping ---------------------------------------------------------------------------


def _nanos(ns: int) -> str:
    """Nanoseconds since the epoch as a JSON number the engine reads as DateTime64(9), every digit.

    Written unquoted: the engine reads a *quoted* time with fewer than 9 integer digits (before
    1973, or 0, OTLP's "unset") as a date and refuses the row; a number it reads for every value.
    """
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{seconds}.{fraction:09d}"


def _hex(raw: bytes, zero: str) -> str:
    """An id in hex, "" when unset or all zero (the exporter's ...ToHexOrEmptyString)."""
    text = raw.hex()
    return "" if text == zero else text


def _service(resource: Resource) -> str:
    """The resource's `service.name` when it is a string (pdata's Str()), else ""."""
    name = ""
    for pair in resource.attributes:
        if pair.key == "service.name":
            name = pair.value.string_value if pair.value.HasField("string_value") else ""
    return name


_text = json.encoder.encode_basestring  # a JSON string literal (C), as json.dumps writes it
_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _log_lines(request: Any, reject: Callable[[str], None]) -> Iterator[str]:
    """One JSONCompactEachRow line per log record, in LOG_COLUMNS order."""
    for resource_logs in request.resource_logs:
        resource = resource_logs.resource
        res_attrs = attributes(resource.attributes)
        service, res_url = _service(resource), resource_logs.schema_url
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            shared = _json(
                [
                    service,
                    res_url,
                    res_attrs,
                    scope_logs.schema_url,
                    scope.name,
                    scope.version,
                    attributes(scope.attributes),
                ]
            )[1:-1]
            for record in scope_logs.log_records:
                trace_id, span_id = record.trace_id, record.span_id
                if len(trace_id) not in (0, 16) or len(span_id) not in (0, 8):
                    reject("a log record has a trace_id or span_id of the wrong length")
                    continue
                ts = record.time_unix_nano or record.observed_time_unix_nano
                if ts > MAX_NANOS:
                    reject("a log record's time is past 2262 (DateTime64(9) ends there)")
                    continue
                body = record.body
                yield (
                    f'[{_nanos(ts)},"{_hex(trace_id, _NO_TRACE)}","{_hex(span_id, _NO_SPAN)}",'
                    f"{record.flags & 0xFF},{_text(record.severity_text)},"
                    f"{record.severity_number & 0xFF},"
                    f"{_text(body.string_value or as_string(body))},"
                    f"{_json(attributes(record.attributes))},{_text(record.event_name)},{shared}]\n"
                )


def _span_lines(request: Any, reject: Callable[[str], None]) -> Iterator[str]:
    """One JSONCompactEachRow line per span, in SPAN_COLUMNS order."""
    for resource_spans in request.resource_spans:
        resource = resource_spans.resource
        res_attrs = attributes(resource.attributes)
        service = _service(resource)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            shared = _json([service, res_attrs, scope.name, scope.version])[1:-1]
            for span in scope_spans.spans:
                problem = _span_problem(span)
                if problem:
                    reject(problem)
                    continue
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                kind, code = span.kind, span.status.code
                events, links = span.events, span.links
                head = [
                    _hex(span.trace_id, _NO_TRACE),
                    _hex(span.span_id, _NO_SPAN),
                    _hex(span.parent_span_id, _NO_SPAN),
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
                    [_hex(link.trace_id, _NO_TRACE) for link in links],
                    [_hex(link.span_id, _NO_SPAN) for link in links],
                    [link.trace_state for link in links],
                    [attributes(link.attributes) for link in links],
                ]
                times = ",".join(_nanos(e.time_unix_nano) for e in events)
                yield (
                    f"[{_nanos(start)},{_json(head)[1:-1]},[{times}],{_json(tail)[1:-1]},{shared}]\n"
                )


def _span_problem(span: Any) -> str:
    """Why the store could not hold the span as the exporter writes it; "" when it can."""
    if len(span.trace_id) not in (0, 16) or len(span.span_id) not in (0, 8):
        return "a span has a trace_id or span_id of the wrong length"
    if len(span.parent_span_id) not in (0, 8):
        return "a span has a parent_span_id of the wrong length"
    if any(
        len(link.trace_id) not in (0, 16) or len(link.span_id) not in (0, 8) for link in span.links
    ):
        return "a span link has a trace_id or span_id of the wrong length"
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if end > MAX_NANOS or any(e.time_unix_nano > MAX_NANOS for e in span.events):
        return "a span's time is past 2262 (DateTime64(9) ends there)"
    if end < start:
        return "a span ends before it starts"
    return ""


# -- OTLP/JSON ids -----------------------------------------------------------------------

# Protobuf's JSON mapping reads bytes as base64; OTLP/JSON writes these ids in hex.
_ID_KEYS = {"traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"}
_WRONG_ID = base64.b64encode(b"\0").decode()  # fails the length test: the record is rejected


def _hex_ids_to_base64(document: dict[str, Any], signal: str) -> None:
    """Rewrite the hex ids of every record, span and link in place, for ParseDict."""
    outer, middle, inner = (
        ("resourceLogs", "scopeLogs", "logRecords")
        if signal == LOGS
        else ("resourceSpans", "scopeSpans", "spans")
    )
    for resource in _items(document, outer):
        for scope in _items(resource, middle):
            for record in _items(scope, inner):
                _convert_ids(record)
                for link in _items(record, "links"):
                    _convert_ids(link)


def _items(parent: Any, camel: str) -> list[Any]:
    """The list under `camel` (or its snake_case name), [] when absent or not a list."""
    if not isinstance(parent, dict):
        return []
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    found = parent.get(camel, parent.get(snake))
    return found if isinstance(found, list) else []


def _convert_ids(record: Any) -> None:
    if not isinstance(record, dict):
        return
    for key in _ID_KEYS & record.keys():
        value = record[key]
        if not isinstance(value, str):
            continue
        try:
            record[key] = base64.b64encode(bytes.fromhex(value)).decode()
        except (ValueError, binascii.Error):
            record[key] = _WRONG_ID
