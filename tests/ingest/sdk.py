"""An agent's telemetry as the OpenTelemetry SDK sends it: the builder's events through its exporters.

Each builder event becomes one log record (the event name as the record's
event name, its metadata as attributes with their own types, `session.id`
and `event.id` beside them), each builder span one span, exported by the
SDK's own OTLP exporters (HTTP/protobuf or gRPC, batched) to a receiver's endpoint.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from grpc import Compression as GrpcCompression
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from tests.builder import Scenario
from tests.exporter import Span

AGENT = Resource.create({"service.name": "agent"})


def nanos(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1_000


def event_attributes(event: Any) -> dict[str, Any]:
    """The event's metadata with its own types (numbers stay numbers, arrays arrays)."""
    meta = json.loads(event.metadata_json) if event.metadata_json is not None else dict(event.meta)
    attributes = {k: v for k, v in meta.items() if v is not None}
    if event.session is not None:
        attributes.setdefault("session.id", event.session)
    attributes["event.id"] = event.id
    return attributes


class _RecordingLogs(LogRecordExporter):
    """The SDK's OTLP log exporter, remembering whether each export succeeded."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.results = inner, list[bool]()

    def export(self, batch: Any) -> LogRecordExportResult:
        outcome = self.inner.export(batch)
        self.results.append(outcome is LogRecordExportResult.SUCCESS)
        return outcome

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return True

    def shutdown(self) -> None:
        self.inner.shutdown()


class _RecordingSpans(SpanExporter):
    """The SDK's OTLP span exporter, remembering whether each export succeeded."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.results = inner, list[bool]()

    def export(self, spans: Any) -> SpanExportResult:
        outcome = self.inner.export(spans)
        self.results.append(outcome is SpanExportResult.SUCCESS)
        return outcome

    def shutdown(self) -> None:
        self.inner.shutdown()


def send_logs(endpoint: str, scenario: Scenario, *, gzip: bool = False, **headers: str) -> bool:
    """Emit the scenario's events as log records over OTLP/HTTP; True when every export succeeded."""
    return _emit(
        OTLPLogExporter(
            endpoint=f"{endpoint}/v1/logs",
            compression=Compression.Gzip if gzip else Compression.NoCompression,
            headers=headers or None,
        ),
        scenario,
    )


def send_logs_grpc(target: str, scenario: Scenario, *, gzip: bool = False, **headers: str) -> bool:
    """Emit the scenario's events as log records over OTLP/gRPC (the SDK's gRPC exporter, to
    HOST:PORT); True when every export succeeded."""
    return _emit(
        GrpcLogExporter(
            endpoint=target,
            insecure=True,
            compression=GrpcCompression.Gzip if gzip else GrpcCompression.NoCompression,
            headers=headers or None,
        ),
        scenario,
    )


def _emit(inner: Any, scenario: Scenario) -> bool:
    exporter = _RecordingLogs(inner)
    provider = LoggerProvider(resource=AGENT)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, max_export_batch_size=64))
    logger = provider.get_logger("memory", "1.0")
    for event in scenario.events:
        failed = event.success == 0
        logger.emit(
            LogRecord(
                timestamp=nanos(event.ts),
                body=event.name,
                severity_number=SeverityNumber.ERROR if failed else SeverityNumber.INFO,
                severity_text="ERROR" if failed else "INFO",
                attributes=event_attributes(event),
                event_name=event.name,
            )
        )
    provider.force_flush()
    provider.shutdown()
    return bool(exporter.results) and all(exporter.results)


def send_spans(endpoint: str, spans: list[Span], *, grpc: bool = False) -> bool:
    """Export the spans, each with its start, duration, session and status, over OTLP/HTTP to
    `endpoint` (or OTLP/gRPC to HOST:PORT); True on success."""
    inner: Any = (
        GrpcSpanExporter(endpoint=endpoint, insecure=True)
        if grpc
        else OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    )
    exporter = _RecordingSpans(inner)
    provider = TracerProvider(resource=AGENT)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64))
    tracer = provider.get_tracer("memory", "1.0")
    for span in spans:
        start = nanos(span.start)
        live = tracer.start_span(
            span.name, start_time=start, attributes={"session.id": span.session, **span.attributes}
        )
        if span.status == "Error":
            live.set_status(Status(StatusCode.ERROR, "failed"))
        elif span.status == "Ok":
            live.set_status(Status(StatusCode.OK))
        live.end(end_time=start + int(span.duration_ms * 1_000_000))
    provider.force_flush()
    provider.shutdown()
    return bool(exporter.results) and all(exporter.results)
