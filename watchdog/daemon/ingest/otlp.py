"""OTLP export requests to batches of rows, and their responses (docs/architecture.md#one-store-one-process-at-a-time-the-receiver).

A body, protobuf (`application/x-protobuf`) or JSON (`application/json`,
ids in hex as the OTLP specification writes them), is decoded with the
`opentelemetry-proto` classes of its signal (`ingest.signals`), and its
records become rows of the exporter's table (`ingest.logs`, `ingest.traces`),
serialised once as ClickHouse's `JSONCompactEachRow`; their digest names the
batch, so the same records sent again are the same batch (`ingest.spool`
keeps them once). A record the store could not hold is rejected alone, and
the response says so (OTLP's partial success).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from watchdog.daemon.ingest.signals import LOGS, SIGNALS, TRACES, Signal

__all__ = ["JSON", "LOGS", "PROTOBUF", "SIGNALS", "TRACES", "BadRequest", "Batch", "Signal"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class BadRequest(Exception):
    """The body is not an OTLP request of this signal and encoding (HTTP 400)."""


@dataclass(frozen=True)
class Batch:
    """One request's accepted records, as rows ready for the store."""

    signal: Signal
    data: bytes  # the rows, JSONCompactEachRow in the signal's column order ("" when none)
    rows: int
    rejected: int = 0
    problem: str = ""  # why the first rejected record was rejected

    @property
    def digest(self) -> str:
        """What names the batch: the same records make the same digest, whatever the encoding."""
        return hashlib.sha256(self.signal.encode() + b"\n" + self.data).hexdigest()[:40]


def new_request(signal: Signal) -> Any:
    return SIGNALS[signal].request()


def decode(signal: Signal, body: bytes, content_type: str) -> Any:
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


def count_records(signal: Signal, request: Any) -> int:
    """Log records or spans in the request."""
    return SIGNALS[signal].records(request)


def to_batch(signal: Signal, request: Any) -> Batch:
    """The request's records as rows, the rejected ones counted with the first reason."""
    rejections: list[str] = []
    lines = list(SIGNALS[signal].rows(request, rejections.append))
    return Batch(
        signal=signal,
        data="".join(lines).encode(),
        rows=len(lines),
        rejected=len(rejections),
        problem=rejections[0] if rejections else "",
    )


def response(signal: Signal, batch: Batch | None, content_type: str) -> bytes:
    """The Export*ServiceResponse, serialised, with a partial success when records were rejected."""
    message = response_message(signal, batch)
    if content_type == JSON:
        return str(json_format.MessageToJson(message, indent=None)).encode()
    return bytes(message.SerializeToString())


def response_message(signal: Signal, batch: Batch | None) -> Any:
    """The Export*ServiceResponse, with a partial success when records were rejected."""
    handler = SIGNALS[signal]
    message = handler.response()
    if batch is not None and batch.rejected:
        handler.reject_count(message.partial_success, batch.rejected)
        message.partial_success.error_message = batch.problem
    return message


# -- OTLP/JSON ids -----------------------------------------------------------------------

# Protobuf's JSON mapping reads bytes as base64; OTLP/JSON writes these ids in hex.
_ID_KEYS = {"traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"}
_WRONG_ID = base64.b64encode(b"\0").decode()  # fails the length test: the record is rejected


def _hex_ids_to_base64(document: dict[str, Any], signal: Signal) -> None:
    """Rewrite the hex ids of every record, span and link in place, for ParseDict."""
    outer, middle, inner = SIGNALS[signal].json_path
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
