"""`memory-watchdog demo --via-otlp`: the demo's events sent as an agent sends them, through the SDK.

Each event becomes a log record (its name the event name and body, its
metadata attributes of their own types with `session.id` and `event.id`,
its source the resource's `service.name`) exported by the SDK's OTLP/HTTP
exporter; the outbox's retries are sent again at the end, as an agent's
retry would (docs/start-without-clickhouse.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from watchdog.core.errors import UsageError
from watchdog.core.store import Store
from watchdog.demo.model import Event
from watchdog.demo.run import DEMO_MARK

DEMO_LOGS_TABLE = "otel.otel_logs"
SEVERITY = {
    "debug": SeverityNumber.DEBUG,
    "info": SeverityNumber.INFO,
    "warn": SeverityNumber.WARN,
    "error": SeverityNumber.ERROR,
    "fatal": SeverityNumber.FATAL,
}
BATCH = 512  # records per export, the SDK's default batch size
QUEUE = 8192  # records the SDK holds before it drops (it sends what an agent emits, not a day)


def session_of(event: Event) -> str:
    """The session the joelclaw preset reads: metadata session_id, then sessionId, then the column."""
    for key in ("session_id", "sessionId"):
        value = event.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return event.session_column or ""


def _attribute(value: Any) -> Any:
    """A metadata value as the SDK takes an attribute: scalars and lists as they are."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list) and all(isinstance(v, str | bool | int | float) for v in value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def record_of(event: Event) -> LogRecord:
    """The event as the log record an instrumented agent emits."""
    attributes = {k: _attribute(v) for k, v in event.metadata.items() if v is not None}
    session = session_of(event)
    if session:
        attributes["session.id"] = session
    attributes["event.id"] = event.id
    if event.duration_ms is not None:
        attributes["duration_ms"] = event.duration_ms
    return LogRecord(
        timestamp=event.ts * 1_000_000,
        observed_timestamp=event.ts * 1_000_000,
        severity_number=SEVERITY.get(event.level, SeverityNumber.INFO),
        severity_text=event.level.upper(),
        body=event.action,
        attributes=attributes,
        event_name=event.action,
    )


def send_events(endpoint: str, events: Iterable[Event], retried: Iterable[Event]) -> None:
    """Emit the events, then the retried ones again, through the SDK's OTLP/HTTP log exporter.

    `endpoint` is the receiver's base URL (`http://127.0.0.1:4318`); one
    logger provider per source, each its own `service.name`.
    """
    providers: dict[str, LoggerProvider] = {}

    def provider_of(source: str) -> LoggerProvider:
        if source not in providers:
            provider = LoggerProvider(resource=Resource.create({"service.name": source}))
            exporter = OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")
            provider.add_log_record_processor(
                BatchLogRecordProcessor(exporter, max_queue_size=QUEUE, max_export_batch_size=BATCH)
            )
            providers[source] = provider
        return providers[source]

    for batch in (events, retried):
        for count, event in enumerate(batch, 1):
            provider_of(event.source).get_logger("memory-demo").emit(record_of(event))
            if count % (QUEUE // 2) == 0:  # a day of telemetry at once: never let the queue fill
                _flush(providers)
        _flush(providers)  # the retries leave after every original
    for provider in providers.values():
        provider.shutdown()


def _flush(providers: dict[str, LoggerProvider]) -> None:
    for provider in providers.values():
        provider.force_flush()


def clear_demo_logs_table(store: Store, table: str = DEMO_LOGS_TABLE) -> None:
    """Drop the demo's logs table from an earlier run; never touch a table the demo did not create."""
    database, _, name = table.partition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": database, "t": name},
    ).rows
    if found and found[0][0] != DEMO_MARK:
        raise UsageError(
            f"--store: {store.url.masked} already has a table {table} the demo did not create;"
            " choose another --store"
        )
    store.command(f"DROP TABLE IF EXISTS {table}")


def mark_demo_logs_table(store: Store, table: str = DEMO_LOGS_TABLE) -> None:
    """Mark the table the receiver created as the demo's, so that the next run may drop it."""
    store.command(f"ALTER TABLE {table} MODIFY COMMENT '{DEMO_MARK}'")
