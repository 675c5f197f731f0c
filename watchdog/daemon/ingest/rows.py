"""Writing the exporter's rows: times, ids, the service name, JSON text (docs/sources.md).

What the log and span mappings (`ingest.logs`, `ingest.traces`) share, each
written as the OpenTelemetry Collector's ClickHouse exporter writes it.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource

# DateTime64(9) ends at 2262-04-11T23:47:16.854775807Z, the largest signed 64-bit count of ns.
MAX_NANOS = 2**63 - 1
NO_TRACE = "0" * 32
NO_SPAN = "0" * 16

text = json.encoder.encode_basestring  # a JSON string literal (C), as json.dumps writes it
json_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def nanos(ns: int) -> str:
    """Nanoseconds since the epoch as a JSON number the engine reads as DateTime64(9), every digit.

    Written unquoted: the engine reads a *quoted* time with fewer than 9 integer digits (before
    1973, or 0, OTLP's "unset") as a date and refuses the row; a number it reads for every value.
    """
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{seconds}.{fraction:09d}"


def hex_id(raw: bytes, zero: str) -> str:
    """An id in hex, "" when unset or all zero (the exporter's ...ToHexOrEmptyString)."""
    value = raw.hex()
    return "" if value == zero else value


def ids_fit(trace_id: bytes, span_id: bytes) -> bool:
    """Whether a trace and a span id have the lengths the exporter's columns hold (or are unset)."""
    return len(trace_id) in (0, 16) and len(span_id) in (0, 8)


def service_name(resource: Resource) -> str:
    """The resource's `service.name` when it is a string (pdata's Str()), else ""."""
    name = ""
    for pair in resource.attributes:
        if pair.key == "service.name":
            name = pair.value.string_value if pair.value.HasField("string_value") else ""
    return name


def shared_columns(values: list[Any]) -> str:
    """Columns of a resource and scope, written once for all their records (no brackets)."""
    return str(json_text(values))[1:-1]
