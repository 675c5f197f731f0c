"""Rows as the OpenTelemetry Collector ClickHouse exporter writes them, in every layout.

Tables are created with the exporter's own DDL (`checks.source_ddl`, each
layout and version), and filled the way the exporter fills them: the
Map layout holds every attribute value as text (numbers in decimal, arrays
as JSON); the JSON layout holds the attributes as a JSON object with their
types (its dotted keys become nested paths), and the newer versions list
the flattened keys, sorted, in the `*AttributesKeys` columns. ServiceName
is the resource's `service.name`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checks.source_ddl import create_table_sql
from tests.builder import Scenario
from watchdog.core.store import Store

SERVICE = "svc"  # the logs' service.name (and ServiceName); the spans' is AGENT
AGENT = "agent"
LOG_LAYOUTS = (
    "otel_logs",
    "otel_logs_v140",
    "otel_logs_legacy",
    "otel_logs_json_v1",
    "otel_logs_json",
    "otel_logs_json_event_name",
)
TRACE_LAYOUTS = ("otel_traces", "otel_traces_legacy", "otel_traces_json_v1", "otel_traces_json")
_WITH_EVENT_NAME = {"otel_logs", "otel_logs_v140", "otel_logs_json_event_name"}
_WITH_KEYS = {"otel_logs_json", "otel_logs_json_event_name", "otel_traces_json"}


def _text(value: Any) -> str:
    """An attribute value as the Map layout holds it: strings as they are, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def flattened_keys(attributes: dict[str, Any], prefix: str = "") -> list[str]:
    """The exporter's `*AttributesKeys`: every leaf path, maps flattened with '.', sorted."""
    keys: set[str] = set()
    for key, value in attributes.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            keys.update(flattened_keys(value, path))
        else:
            keys.add(path)
    return sorted(keys)


def _attributes(layout: str, attributes: dict[str, Any], column: str) -> dict[str, Any]:
    """The attribute column (and its keys column, when the layout has one) of one row."""
    if "json" not in layout:
        return {column: {k: _text(v) for k, v in attributes.items()}}
    found: dict[str, Any] = {column: json.dumps(attributes)}
    if layout in _WITH_KEYS:
        found[f"{column}Keys"] = flattened_keys(attributes)
    return found


def _create(store: Store, layout: str, table: str) -> None:
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(create_table_sql(layout, table))


def _insert(store: Store, table: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    store.insert(table, [[row[c] for c in columns] for row in rows], columns)


def write_otel_logs(
    store: Store,
    table: str,
    scenario: Scenario,
    *,
    layout: str = "otel_logs",
    legacy: bool = False,
    name_in_attributes: bool = False,
    session_key: str = "session.id",
    session_in_resource: bool = False,
) -> None:
    """Write the scenario as log rows of `layout` (`legacy`: the version without EventName).

    Each event carries `event.id`; its session goes into `session_key` of
    the log attributes (or of the resource's); its name into EventName
    when the layout has one, else into the `event.name` attribute.
    """
    layout = "otel_logs_legacy" if legacy else layout
    _create(store, layout, table)
    has_event_name = layout in _WITH_EVENT_NAME
    rows = []
    for e in scenario.events:
        attributes: dict[str, Any] = dict(e.meta)
        if e.metadata_json is not None:
            attributes = json.loads(e.metadata_json)
        resource: dict[str, Any] = {"service.name": SERVICE}
        if e.session is not None:
            (resource if session_in_resource else attributes).setdefault(session_key, e.session)
        attributes["event.id"] = e.id
        if not has_event_name or name_in_attributes:
            attributes["event.name"] = e.name
        row: dict[str, Any] = {"Timestamp": e.ts, "ServiceName": SERVICE, "SeverityText": "INFO"}
        row |= _attributes(layout, attributes, "LogAttributes")
        row |= _attributes(layout, resource, "ResourceAttributes")
        if has_event_name:
            row["EventName"] = "" if name_in_attributes else e.name
        rows.append(row)
    _insert(store, table, rows)


@dataclass(frozen=True)
class Span:
    name: str
    start: datetime
    duration_ms: float
    session: str
    status: str = "Ok"
    attributes: dict[str, Any] = field(default_factory=dict)


def write_otel_traces(
    store: Store,
    table: str,
    spans: list[Span],
    *,
    layout: str = "otel_traces",
    session_key: str = "session.id",
    session_in_resource: bool = False,
) -> None:
    """Write spans as trace rows of `layout`, the session in the span's (or resource's) attributes."""
    _create(store, layout, table)
    rows = []
    for i, s in enumerate(spans):
        session = {session_key: s.session}
        own = s.attributes if session_in_resource else {**session, **s.attributes}
        resource = {"service.name": AGENT, **(session if session_in_resource else {})}
        row: dict[str, Any] = {
            "Timestamp": s.start,
            "SpanId": f"span-{i:06d}",
            "SpanName": s.name,
            "ServiceName": AGENT,
            "Duration": int(s.duration_ms * 1_000_000),
            "StatusCode": s.status,
        }
        row |= _attributes(layout, own, "SpanAttributes")
        row |= _attributes(layout, resource, "ResourceAttributes")
        rows.append(row)
    _insert(store, table, rows)
