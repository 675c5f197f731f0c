"""Presets: how a table layout maps to the normalized event (docs/spec.md section 2): a column
expression per normalized column, the read-range filter, and what data quality and triage
need; the joelclaw and normalized presets here, the exporter's in `checks.otel`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from watchdog.core.settings import NORMALIZED_COLUMNS

LB = "fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
AT = "fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC')"
# The source table's alias in the compiled SELECT, to name a raw column an alias shadows.
SOURCE_ALIAS = "_source"


@dataclass(frozen=True)
class Expr:
    """A column expression and the raw columns it reads."""

    sql: str
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class ColumnType:
    """The ClickHouse types a preset can read in one raw column, and how to name them."""

    pattern: str  # a regular expression over `system.columns.type`, matched whole
    accepted: str  # the types in words, for the error that names them

    def accepts(self, type_name: str) -> bool:
        return re.fullmatch(self.pattern, type_name) is not None


STRING = ColumnType(
    r"String|Nullable\(String\)|LowCardinality\((String|Nullable\(String\))\)",
    "String or LowCardinality(String)",
)
TIME = ColumnType(
    r"DateTime64\(\d+(, ?'[^']*')?\)|DateTime(\('[^']*'\))?", "DateTime64(n) or DateTime"
)
INTEGER = ColumnType(r"U?Int(8|16|32|64)", "an integer type (UInt64, ...)")

PAYLOAD_OBJECT = Expr("JSONType(payload) = 'Object'")
PAYLOAD_UTF8 = Expr("isValidUTF8(payload)")
NO_ID_HINT = Expr("''")


@dataclass(frozen=True)
class Preset:
    """How one table layout maps to the normalized event."""

    name: str
    columns: Mapping[str, Expr]  # normalized column -> expression (session_id before ignore)
    ts_filter: Expr  # the WHERE clause restricting the read range; may use {lb}/{at}
    array_join: str = ""  # e.g. traces: one span yields a start and an end event
    # The latency as written, to tell "not a number" apart from "absent" (data quality).
    latency_raw: Expr | None = None
    # Triage: what a failing event can be grouped by (name -> raw-column expression).
    dimensions: Mapping[str, Expr] = field(default_factory=dict)
    # Data quality, counted on every event: whether the payload is a JSON object and
    # whether it is valid UTF-8. The defaults parse the payload text; a preset may
    # give an exact equivalent that is cheaper on its layout.
    payload_object: Expr = PAYLOAD_OBJECT
    payload_utf8: Expr = PAYLOAD_UTF8
    # An expression equal to event_id wherever it is not empty, cheaper to read (the
    # evidence lookup filters on it before computing event_id); "" when there is none.
    event_id_hint: Expr = NO_ID_HINT
    # The session id is read from inside the payload (joelclaw's metadata): a payload that
    # is no JSON object leaves its event without a session, which the report says.
    session_in_payload: bool = False
    # The types each raw column it reads may have: another type is a schema error.
    types: Mapping[str, ColumnType] = field(default_factory=dict)


def _readable(extract: str) -> str:
    """`extract` (a SQL template on `{m}`) of joelclaw's metadata, read as ClickHouse can read it.

    The JSON functions refuse a whole document with one invalid UTF-8 byte in
    it (a query cut mid-character): such metadata is read again with the bad
    bytes replaced by U+FFFD. The `if` evaluates its branches lazily, so valid
    metadata (nearly all of it) is parsed once, as before.
    """
    return (
        f"if(isValidUTF8(metadata_json), {extract.format(m='metadata_json')},"
        f" {extract.format(m='toValidUTF8(metadata_json)')})"
    )


# joelclaw's session id keys in metadata. The session id and the payload test share
# these very expressions, so ClickHouse parses the metadata once for both.
_META_SESSION_ID = _readable("JSONExtractString({m}, 'session_id')")
_META_SESSION_ID_WORKERS = _readable("JSONExtractString({m}, 'sessionId')")
_META_LATENCY = _readable("JSONExtract({m}, 'latency_ms', 'Nullable(Float64)')")

JOELCLAW = Preset(
    name="joelclaw",
    columns={
        "event_id": Expr("id", ("id",)),
        "ts": Expr("timestamp", ("timestamp",)),
        # First non-empty of metadata.session_id (extensions), metadata.sessionId
        # (workers), then the top-level column (often a placeholder).
        "session_id": Expr(
            f"multiIf({_META_SESSION_ID} != '', {_META_SESSION_ID},"
            f" {_META_SESSION_ID_WORKERS} != '', {_META_SESSION_ID_WORKERS}, ifNull(sessionId, ''))",
            ("metadata_json", "sessionId"),
        ),
        "name": Expr("action", ("action",)),
        "latency_ms": Expr(
            f"coalesce({_META_LATENCY}, toFloat64(duration_ms))", ("metadata_json", "duration_ms")
        ),
        "trigger": Expr(_readable("JSONExtractString({m}, 'trigger')"), ("metadata_json",)),
        "result_count": Expr(
            _readable("JSONExtract({m}, 'result_count', 'Nullable(Int64)')"), ("metadata_json",)
        ),
        # Read as the session id is: invalid bytes replaced (only where a check reads it).
        "payload": Expr(_readable("{m}"), ("metadata_json",)),
    },
    ts_filter=Expr(f"timestamp >= {LB} AND timestamp < {AT}", ("timestamp",)),
    latency_raw=Expr(_readable("JSONExtractRaw({m}, 'latency_ms')"), ("metadata_json",)),
    # Metadata a session id was read from parsed as an object: the session id's own
    # parse answers for most rows, and only the others are parsed again.
    payload_object=Expr(
        f"({_META_SESSION_ID} != '' OR {_META_SESSION_ID_WORKERS} != ''"
        f" OR {_readable('JSONType({m})')} = 'Object')",
        ("metadata_json",),
    ),
    # The bytes as written (the payload column above is already repaired).
    payload_utf8=Expr("isValidUTF8(metadata_json)", ("metadata_json",)),
    session_in_payload=True,
    dimensions={
        "source": Expr("source", ("source",)),
        "component": Expr("component", ("component",)),
        "error": Expr("error", ("error",)),
    },
    types={
        "id": STRING,
        "timestamp": TIME,
        "sessionId": STRING,
        "action": STRING,
        "metadata_json": STRING,
    },
)

NORMALIZED = Preset(
    name="normalized",
    # Qualified: the compiled SELECT defines aliases with these very names.
    columns={name: Expr(f"{SOURCE_ALIAS}.{name}", (name,)) for name in NORMALIZED_COLUMNS},
    ts_filter=Expr(f"{SOURCE_ALIAS}.ts >= {LB} AND {SOURCE_ALIAS}.ts < {AT}", ("ts",)),
)
