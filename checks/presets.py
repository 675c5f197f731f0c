"""Presets: how a table layout maps to the normalized event: a column expression per normalized
column, the read-range filter, and what data quality and triage need; the joelclaw and
normalized presets here, the exporter's in `checks.otel`
(docs/spec.md#2-data-sources-presets-the-normalized-event).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from watchdog.core.settings import NORMALIZED_COLUMNS
from watchdog.core.sql import quoted

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

# Where an event's error class is, after a layout's own error column: OpenTelemetry's
# semantic conventions (`error.type` on spans and logs, `exception.type` on exception
# records), then a free-text `error` attribute as agents often write it.
DEFAULT_ERROR_KEYS = ("error.type", "exception.type", "error")

PAYLOAD_OBJECT = Expr("JSONType(payload) = 'Object'")
PAYLOAD_UTF8 = Expr("isValidUTF8(payload)")
NO_ID_HINT = Expr("''")


@dataclass(frozen=True)
class Attribute:
    """How a preset reads one key of an event's attributes as text ('' when absent)."""

    read: Callable[[str], str]  # key -> SQL
    reads: tuple[str, ...]  # the raw columns it reads


@dataclass(frozen=True)
class Preset:
    """How one table layout maps to the normalized event."""

    name: str
    columns: Mapping[str, Expr]  # normalized column -> expression (session_id before ignore)
    ts_filter: Expr  # the WHERE clause restricting the read range; may use {lb}/{at}
    array_join: str = ""  # e.g. traces: one span yields a start and an end event
    # 1 when the event carries a latency that is not a number (present, not null), as
    # written: data quality tells it apart from an absent one.
    latency_unparsable: Expr | None = None
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
    # The error class (triage's `error` dimension, `with_error_keys`): `dimensions["error"]`
    # when the layout has an error column of its own, then the first present of the error
    # keys (`source.error_keys`, else these) as `attribute` reads one.
    error_keys: tuple[str, ...] = DEFAULT_ERROR_KEYS
    attribute: Attribute | None = None

    def with_error_keys(self, keys: Sequence[str] | None) -> Preset:
        """The preset with its `error` dimension: its own error column, then the first present
        of `keys` (None: the preset's own) among the event's attributes."""
        if self.attribute is None:
            return self
        own = self.dimensions.get("error")
        values = [own.sql] if own is not None else []
        values += [self.attribute.read(key) for key in (self.error_keys if keys is None else keys)]
        if not values:
            return self
        reads = (*(own.reads if own is not None else ()), *self.attribute.reads)
        error = Expr(first_non_empty(values), tuple(dict.fromkeys(reads)))
        return replace(self, dimensions={**self.dimensions, "error": error})


def first_non_empty(values: Sequence[str]) -> str:
    """SQL: the first of `values` that is not '' (else '')."""
    if len(values) == 1:
        return values[0]
    pairs = "".join(f"{v} != '', {v}, " for v in values[:-1])
    return f"multiIf({pairs}{values[-1]})"


def _readable(extract: Callable[[str], str]) -> str:
    """`extract` of joelclaw's metadata, read as ClickHouse can read it.

    The JSON functions refuse a whole document with one invalid UTF-8 byte in
    it (a query cut mid-character): such metadata is read again with the bad
    bytes replaced by U+FFFD. The `if` evaluates its branches lazily, so valid
    metadata (nearly all of it) is parsed once.
    """
    return (
        f"if(isValidUTF8(metadata_json), {extract('metadata_json')},"
        f" {extract('toValidUTF8(metadata_json)')})"
    )


# Every field of joelclaw's metadata the scans read, with one parse per event: a named
# tuple, each element read as JSONExtract reads that field on its own (the latency as its
# text: a number's digits, a string's content). The tuple is read from objects only (an
# array would fill it by position). Each column below writes the same expression, which
# ClickHouse computes once per row.
_META_TYPE = (
    "Tuple(session_id String, sessionId String, latency_ms Nullable(String),"
    " result_count Nullable(Int64), trigger String)"
)
_META = (
    # `{` written as char(123) and \\x7B: no brace in a view's stored definition reads as a
    # query parameter.
    "if(startsWith(metadata_json, char(123)) OR match(metadata_json, '^[ \\t\\n\\r]+\\\\x7B'), "
    + _readable(lambda m: f"JSONExtract({m}, '{_META_TYPE}')")
    + f", CAST(('', '', NULL, NULL, ''), '{_META_TYPE}'))"
)


def _meta(field: str) -> str:
    return f"tupleElement({_META}, '{field}')"


_META_SESSION_ID = _meta("session_id")
_META_SESSION_ID_WORKERS = _meta("sessionId")
_META_LATENCY_TEXT = _meta("latency_ms")
# The latency as JSONExtract(..., 'Nullable(Float64)') reads it. From its text but for
# `true` and `false` (1 and 0 as booleans, nothing as strings), read again as written.
_META_LATENCY = (
    f"if({_META_LATENCY_TEXT} IN ('true', 'false'),"
    + _readable(lambda m: f"JSONExtract(JSONExtractRaw({m}, 'latency_ms'), 'Nullable(Float64)')")
    + f", toFloat64OrNull({_META_LATENCY_TEXT}))"
)

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
        "trigger": Expr(_meta("trigger"), ("metadata_json",)),
        "result_count": Expr(_meta("result_count"), ("metadata_json",)),
        # Read as the session id is: invalid bytes replaced (only where a check reads it).
        "payload": Expr(_readable(lambda m: m), ("metadata_json",)),
    },
    ts_filter=Expr(f"timestamp >= {LB} AND timestamp < {AT}", ("timestamp",)),
    # Present and not null, but no number (`"fast"`, `true`, `[1]`, `""`).
    latency_unparsable=Expr(
        f"({_META_LATENCY_TEXT} IS NOT NULL AND toFloat64OrNull({_META_LATENCY_TEXT}) IS NULL)",
        ("metadata_json",),
    ),
    # Metadata a session id was read from parsed as an object: the session id's own
    # parse answers for most rows, and only the others are parsed again.
    payload_object=Expr(
        f"({_META_SESSION_ID} != '' OR {_META_SESSION_ID_WORKERS} != ''"
        f" OR {_readable(lambda m: f'JSONType({m})')} = 'Object')",
        ("metadata_json",),
    ),
    # The bytes as written (the payload column above is already repaired).
    payload_utf8=Expr("isValidUTF8(metadata_json)", ("metadata_json",)),
    # The event id is the table's first sorting key: the evidence lookup by id reads only
    # the granules that may hold a cited id.
    event_id_hint=Expr(SOURCE_ALIAS + ".id", ("id",)),
    session_in_payload=True,
    dimensions={
        "source": Expr("source", ("source",)),
        "component": Expr("component", ("component",)),
        "error": Expr("error", ("error",)),
    },
    # The `error` column only, unless `source.error_keys` names metadata keys to read where
    # it is empty (each one parses the metadata of every event again).
    error_keys=(),
    attribute=Attribute(
        lambda key: _readable(lambda m: f"JSONExtractString({m}, {quoted(key)})"),
        ("metadata_json",),
    ),
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
    # The narrow table (`schema apply --materialize`) stores the raw preset's error class in
    # its `dims`; a table of your own without that column has no error dimension of its own.
    dimensions={"error": Expr(f"{SOURCE_ALIAS}.dims['error']", ("dims",))},
    attribute=Attribute(
        lambda key: f"JSONExtractString({SOURCE_ALIAS}.payload, {quoted(key)})", ("payload",)
    ),
)


# A preset built for a table's column types (None: its usual layout) and the session keys.
PresetBuilder = Callable[[Mapping[str, str] | None, Sequence[str]], Preset]


@dataclass(frozen=True)
class PresetPlugin:
    """One preset, declared once in its module (`PRESET`, checks.layouts.<name>): its name,
    its table when `source.table` is unset, the OTLP signal whose exporter table it reads
    (None: none), whether a telemetry writer fills its table (the normalized one is a table
    you build), and how it is built for a table's columns."""

    name: str
    table: str
    build: PresetBuilder
    signal: str | None = None
    written: bool = True
