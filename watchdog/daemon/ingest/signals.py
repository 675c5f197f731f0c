"""The OTLP signals the receiver takes, a handler each: everything about logs, everything about traces.

A `SignalHandler` owns its variant: its name, its OTLP/HTTP path and gRPC
service, its request and response messages, the exporter table's columns
and the preset that reads it, where its records sit in a request, and how
they become rows (`ingest.logs`, `ingest.traces`). The receiver, the
loader, the metrics and the servers iterate over `SIGNALS`; a new signal is
its module and one line here (docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from watchdog.core.settings.ingest import IngestSettings
from watchdog.daemon.ingest import logs, traces


class Signal(StrEnum):
    """An OTLP signal the receiver takes (its value names it in metrics and batch names)."""

    LOGS = "logs"
    TRACES = "traces"


@dataclass(frozen=True)
class SignalHandler:
    """One signal, all of it."""

    signal: Signal
    path: str  # OTLP/HTTP
    service: str  # OTLP/gRPC, the service's full name
    request: type[Any]  # Export*ServiceRequest
    response: type[Any]  # Export*ServiceResponse
    columns: tuple[str, ...]  # of the exporter's table, in the order each row carries them
    # Where the records sit: the request's resources, their scopes, the scopes' records
    # (protobuf field names; OTLP/JSON writes them in camelCase).
    record_path: tuple[str, str, str]
    rows: Callable[[Any, Callable[[str], None]], Iterator[str]]  # request, reject -> rows
    reject_count: Callable[[Any, int], None]  # (partial_success, n)

    @property
    def json_path(self) -> tuple[str, ...]:
        return tuple(_camel(name) for name in self.record_path)

    def table(self, ingest: IngestSettings) -> str:
        """The table its rows go to (`[ingest] logs_table`, `traces_table`)."""
        return str(getattr(ingest, f"{self.signal.value}_table"))

    def records(self, request: Any) -> int:
        """The records in a decoded request."""
        outer, middle, inner = self.record_path
        return sum(
            len(getattr(scope, inner))
            for resource in getattr(request, outer)
            for scope in getattr(resource, middle)
        )


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word.title() for word in rest)


SIGNALS: dict[Signal, SignalHandler] = {
    handler.signal: handler
    for handler in (
        SignalHandler(
            signal=Signal.LOGS,
            path="/v1/logs",
            service=logs.SERVICE,
            request=logs.REQUEST,
            response=logs.RESPONSE,
            columns=logs.COLUMNS,
            record_path=("resource_logs", "scope_logs", "log_records"),
            rows=logs.rows,
            reject_count=logs.reject_count,
        ),
        SignalHandler(
            signal=Signal.TRACES,
            path="/v1/traces",
            service=traces.SERVICE,
            request=traces.REQUEST,
            response=traces.RESPONSE,
            columns=traces.COLUMNS,
            record_path=("resource_spans", "scope_spans", "spans"),
            rows=traces.rows,
            reject_count=traces.reject_count,
        ),
    )
}
LOGS, TRACES = Signal.LOGS, Signal.TRACES
