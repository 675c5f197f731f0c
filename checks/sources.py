"""Sources: each preset compiles to one SQL subquery yielding the normalized event.

The normalized event (docs/spec.md section 2) has the columns `event_id, ts,
session_id, name, latency_ms, trigger, result_count, payload`; the compiled
subquery adds `t` (ts in epoch milliseconds, what the checks compare) and
`in_scope` (whether the event may define a session, from `session_filter`).
It reads only `[at - lookback, at)`: `{lb_ms:Int64}` and `{at_ms:Int64}` are
bound by the caller. Column expressions are SQL by design (config is
trusted, like a datasource query in Grafana); data values never are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.errors import StoreError
from watchdog.core.settings import NORMALIZED_COLUMNS, SourceSettings
from watchdog.core.store import Store

# service.name of the watchdog's own OpenTelemetry (watchdog.daemon.telemetry uses it).
OWN_SERVICE_NAME = "memory-watchdog"
OWN_TELEMETRY_PRESETS = ("otel_logs", "otel_traces")

LB = "fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
AT = "fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC')"
# The source table's alias in the compiled SELECT, to name a raw column an alias shadows.
SOURCE_ALIAS = "_source"


@dataclass(frozen=True)
class Expr:
    """A column expression and the raw columns it reads."""

    sql: str
    reads: tuple[str, ...] = ()


_PAYLOAD_OBJECT = Expr("JSONType(payload) = 'Object'")
_PAYLOAD_UTF8 = Expr("isValidUTF8(payload)")
_NO_ID_HINT = Expr("''")


@dataclass(frozen=True)
class Preset:
    """How one table layout maps to the normalized event."""

    name: str
    columns: Mapping[str, Expr]  # normalized column -> expression (session_id before ignore)
    ts_filter: Expr  # the WHERE clause restricting the read range; may use {lb}/{at}
    array_join: str = ""  # e.g. traces: one span yields a start and an end event
    # The latency as written, to tell "not a number" apart from "absent" (data quality).
    latency_raw: Expr | None = None
    variants: Mapping[str, Mapping[str, Expr]] = field(default_factory=dict)
    # Triage: what a failing event can be grouped by (name -> raw-column expression).
    dimensions: Mapping[str, Expr] = field(default_factory=dict)
    # Data quality, counted on every event: whether the payload is a JSON object and
    # whether it is valid UTF-8. The defaults parse the payload text; a preset may
    # give an exact equivalent that is cheaper on its layout.
    payload_object: Expr = _PAYLOAD_OBJECT
    payload_utf8: Expr = _PAYLOAD_UTF8
    # An expression equal to event_id wherever it is not empty, cheaper to read (the
    # evidence lookup filters on it before computing event_id); "" when there is none.
    event_id_hint: Expr = _NO_ID_HINT
    # The session id is read from inside the payload (joelclaw's metadata): a payload that
    # is no JSON object leaves its event without a session, which the report says.
    session_in_payload: bool = False

    def resolve(self, present: set[str]) -> dict[str, Expr]:
        """The column expressions for a table with the `present` raw columns."""
        columns = dict(self.columns)
        for marker, override in self.variants.items():
            if (marker.startswith("!") and marker[1:] not in present) or (
                not marker.startswith("!") and marker in present
            ):
                columns.update(override)
        return columns


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

_JOELCLAW = Preset(
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
)


def _map_utf8(column: str) -> Expr:
    """Whether every key and value of a Map column is valid UTF-8.

    A Map payload serialises to a JSON object unless one of them is not
    (toJSONString passes the bytes through, and the text then does not parse):
    both payload checks are this one test, without serialising the map.
    """
    return Expr(
        f"(arrayAll(x -> isValidUTF8(x), mapKeys({column}))"
        f" AND arrayAll(x -> isValidUTF8(x), mapValues({column})))",
        (column,),
    )


_OTEL_SESSION = Expr(
    "if(LogAttributes['session.id'] != '', LogAttributes['session.id'],"
    " ResourceAttributes['session.id'])",
    ("LogAttributes", "ResourceAttributes"),
)

_OTEL_LOGS = Preset(
    name="otel_logs",
    columns={
        "event_id": Expr(
            "if(LogAttributes['event.id'] != '', LogAttributes['event.id'],"
            " hex(cityHash64(Timestamp, ServiceName, Body, TraceId, SpanId,"
            " toString(LogAttributes), toString(ResourceAttributes))))",
            ("LogAttributes", "Timestamp", "ServiceName", "Body", "TraceId", "SpanId"),
        ),
        "ts": Expr("toDateTime64(Timestamp, 3, 'UTC')", ("Timestamp",)),
        "session_id": _OTEL_SESSION,
        "name": Expr(
            "if(EventName != '', EventName, LogAttributes['event.name'])",
            ("EventName", "LogAttributes"),
        ),
        "latency_ms": Expr(
            "coalesce(toFloat64OrNull(LogAttributes['latency_ms']),"
            " toFloat64OrNull(LogAttributes['duration_ms']))",
            ("LogAttributes",),
        ),
        "trigger": Expr("LogAttributes['trigger']", ("LogAttributes",)),
        "result_count": Expr("toInt64OrNull(LogAttributes['result_count'])", ("LogAttributes",)),
        "payload": Expr("toJSONString(LogAttributes)", ("LogAttributes",)),
    },
    ts_filter=Expr(f"Timestamp >= {LB} AND Timestamp < {AT}", ("Timestamp",)),
    latency_raw=Expr("LogAttributes['latency_ms']", ("LogAttributes",)),
    variants={
        # The older exporter schema has no EventName: the name is an attribute.
        "!EventName": {"name": Expr("LogAttributes['event.name']", ("LogAttributes",))},
    },
    dimensions={
        "ServiceName": Expr("ServiceName", ("ServiceName",)),
        "SeverityText": Expr("SeverityText", ("SeverityText",)),
    },
    event_id_hint=Expr("LogAttributes['event.id']", ("LogAttributes",)),
    payload_object=_map_utf8("LogAttributes"),
    payload_utf8=_map_utf8("LogAttributes"),
)

# The older schema also has TimestampTime (DateTime), which leads its ORDER BY:
# filtering on it too lets ClickHouse skip granules.
_OTEL_LOGS_LEGACY_FILTER = Expr(
    f"TimestampTime >= toDateTime(intDiv({{lb_ms:Int64}}, 1000), 'UTC')"
    f" AND TimestampTime <= toDateTime(intDiv({{at_ms:Int64}}, 1000), 'UTC')"
    f" AND Timestamp >= {LB} AND Timestamp < {AT}",
    ("Timestamp", "TimestampTime"),
)

_TRACE_FAILED = "StatusCode IN ('Error', 'STATUS_CODE_ERROR')"
_OTEL_TRACES = Preset(
    name="otel_traces",
    # A span yields `<SpanName>.started` at its start and `<SpanName>.completed`
    # or `.failed` at its end, with the span's duration as latency.
    columns={
        "event_id": Expr("concat(SpanId, if(_phase = 0, ':start', ':end'))", ("SpanId",)),
        "ts": Expr(
            "toDateTime64(if(_phase = 0, Timestamp,"
            " Timestamp + toIntervalNanosecond(Duration)), 3, 'UTC')",
            ("Timestamp", "Duration"),
        ),
        "session_id": Expr(
            "if(SpanAttributes['session.id'] != '', SpanAttributes['session.id'],"
            " ResourceAttributes['session.id'])",
            ("SpanAttributes", "ResourceAttributes"),
        ),
        "name": Expr(
            f"concat(SpanName, if(_phase = 0, '.started', if({_TRACE_FAILED}, '.failed', '.completed')))",
            ("SpanName", "StatusCode"),
        ),
        "latency_ms": Expr("if(_phase = 1, Duration / 1e6, NULL)", ("Duration",)),
        "trigger": Expr("SpanAttributes['trigger']", ("SpanAttributes",)),
        "result_count": Expr("toInt64OrNull(SpanAttributes['result_count'])", ("SpanAttributes",)),
        "payload": Expr("toJSONString(SpanAttributes)", ("SpanAttributes",)),
    },
    ts_filter=Expr(f"Timestamp >= {LB} AND Timestamp < {AT}", ("Timestamp",)),
    array_join="ARRAY JOIN [0, 1] AS _phase",
    dimensions={
        "ServiceName": Expr("ServiceName", ("ServiceName",)),
        "StatusMessage": Expr("StatusMessage", ("StatusMessage",)),
    },
    payload_object=_map_utf8("SpanAttributes"),
    payload_utf8=_map_utf8("SpanAttributes"),
)

_NORMALIZED = Preset(
    name="normalized",
    # Qualified: the compiled SELECT defines aliases with these very names.
    columns={name: Expr(f"{SOURCE_ALIAS}.{name}", (name,)) for name in NORMALIZED_COLUMNS},
    ts_filter=Expr(f"{SOURCE_ALIAS}.ts >= {LB} AND {SOURCE_ALIAS}.ts < {AT}", ("ts",)),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (_JOELCLAW, _OTEL_LOGS, _OTEL_TRACES, _NORMALIZED)}


@dataclass(frozen=True)
class CompiledSource:
    """A source ready to query: the normalized-event subquery and its parameters."""

    name: str
    preset: str
    table: str
    sql: str
    params: Mapping[str, Any]
    columns: Mapping[str, str]  # normalized column -> expression, for benchmarks and docs
    typed: Mapping[str, str] = field(default_factory=dict)  # the same, converted (typed_columns)
    session_in_payload: bool = False  # Preset.session_in_payload
    dims: Mapping[str, str] = field(default_factory=dict)  # triage dimension -> expression
    dims_sql: str = ""  # `sql` plus a `dim_<name>` column per dimension

    def events_with_dims(self) -> str:
        """The normalized-event relation with the triage dimensions, as a subquery."""
        return f"({self.dims_sql or self.sql})"

    def events(self) -> str:
        """The normalized-event relation, as a parenthesized subquery."""
        return f"({self.sql})"


def typed_columns(columns: Mapping[str, Expr]) -> dict[str, str]:
    """Each normalized column as the SQL that converts its expression to the column's type.

    The compiled source and the narrow table (`checks.materialize`) both use
    these, so what the normalized preset reads back is what the raw preset
    would have computed. The session id is before the ignore list, the
    latency before the finite-and-not-negative rule: both are applied at read.
    """
    c = {key: expr.sql for key, expr in columns.items()}
    return {
        "event_id": f"toString({c['event_id']})",
        "ts": f"toDateTime64({c['ts']}, 3, 'UTC')",
        "session_id": f"toString({c['session_id']})",
        "name": f"toString({c['name']})",
        "latency_ms": f"toFloat64OrNull(toString({c['latency_ms']}))",
        "trigger": f"toString({c['trigger']})",
        "result_count": f"toInt64OrNull(toString({c['result_count']}))",
        "payload": f"toString({c['payload']})",
    }


@dataclass(frozen=True)
class _Resolved:
    """The preset's expressions for one table, with the config's overrides applied."""

    columns: dict[str, Expr]
    ts_filter: Expr
    payload_object: Expr
    payload_utf8: Expr
    id_hint: Expr


def _resolve(preset: Preset, settings: SourceSettings, present: set[str] | None) -> _Resolved:
    columns = preset.resolve(present or set(preset.columns) | {"EventName"})
    ts_filter = preset.ts_filter
    if preset.name == "otel_logs" and present is not None and "TimestampTime" in present:
        ts_filter = _OTEL_LOGS_LEGACY_FILTER
    for key, sql in settings.columns.items():
        columns[key] = Expr(sql)
    if "ts" in settings.columns:
        # The read range then follows the user's own time expression.
        ts = settings.columns["ts"]
        ts_filter = Expr(f"({ts}) >= {LB} AND ({ts}) < {AT}")
    payload_object, payload_utf8 = preset.payload_object, preset.payload_utf8
    if "payload" in settings.columns:  # the user's own payload: parse it
        payload_object, payload_utf8 = _PAYLOAD_OBJECT, _PAYLOAD_UTF8
    id_hint = _NO_ID_HINT if "event_id" in settings.columns else preset.event_id_hint
    return _Resolved(columns, ts_filter, payload_object, payload_utf8, id_hint)


def _select_items(
    preset: Preset,
    settings: SourceSettings,
    resolved: _Resolved,
    scopes: Mapping[str, str] | None,
) -> str:
    typed = typed_columns(resolved.columns)
    scope = (
        f"toUInt8(({settings.session_filter}) != 0)" if settings.session_filter else "toUInt8(1)"
    )
    return ",\n    ".join(
        [
            f"{typed['event_id']} AS event_id",
            f"{typed['ts']} AS ts",
            "toUnixTimestamp64Milli(ts) AS t",
            f"{typed['session_id']} AS _session_raw",
            "if(_session_raw IN {ignore_sessions:Array(String)}, '', _session_raw) AS session_id",
            f"{typed['name']} AS name",
            # Negative, NaN and infinite latencies are not latencies: NULL.
            "if(isFinite(assumeNotNull(_lat)) AND _lat >= 0, _lat, NULL) AS latency_ms",
            f"{typed['latency_ms']} AS _lat",
            f"{typed['trigger']} AS trigger",
            f"{typed['result_count']} AS result_count",
            f"{typed['payload']} AS payload",
            f"{scope} AS in_scope",
            f"{_latency_invalid(preset, settings)} AS latency_invalid",
            f"toString({resolved.id_hint.sql}) AS event_id_hint",
            f"toUInt8({resolved.payload_object.sql}) AS payload_is_object",
            f"toUInt8({resolved.payload_utf8.sql}) AS payload_is_utf8",
            *(f"toUInt8(({sql}) != 0) AS scope_{name}" for name, sql in (scopes or {}).items()),
        ]
    )


def compile_source(
    settings: SourceSettings,
    present: set[str] | None = None,
    scopes: Mapping[str, str] | None = None,
) -> CompiledSource:
    """Compile the configured source; `present` is the table's raw columns, when known.

    `scopes` maps a name to a SQL predicate (a check's own session filter):
    each becomes a `scope_<name>` column, like `in_scope` for the source's.
    """
    preset = PRESETS[settings.preset]
    table = settings.table_name
    resolved = _resolve(preset, settings, present)
    columns, ts_filter = resolved.columns, resolved.ts_filter
    select = _select_items(preset, settings, resolved, scopes)

    # The watchdog's own telemetry (exported over OTLP) may land in these very
    # tables: it is never agent telemetry, so it never counts (nor keeps a
    # silent source looking fresh).
    own = ""
    if preset.name in OWN_TELEMETRY_PRESETS and present is not None and "ServiceName" in present:
        own = " AND ServiceName != {own_service:String}"

    def assemble(items: str) -> str:
        text = (
            f"SELECT\n    {items}\nFROM {table} AS {SOURCE_ALIAS} {preset.array_join}"
            f"\nWHERE {ts_filter.sql}{own}"
        )
        return f"SELECT * FROM ({text}) WHERE t < {{at_ms:Int64}}" if preset.array_join else text

    sql = assemble(select)
    # Dimensions whose columns the table lacks are left out: triage only, never an error.
    dims = {
        name: expr.sql
        for name, expr in preset.dimensions.items()
        if present is None or set(expr.reads) <= present
    }
    dims_sql = assemble(
        select + "".join(f",\n    toString({expr}) AS dim_{name}" for name, expr in dims.items())
    )
    reads = set(ts_filter.reads)
    for key, expr in columns.items():
        if key not in settings.columns:
            reads.update(expr.reads)
    if present is not None:
        missing = sorted(reads - present)
        if missing:
            raise MissingColumnsError(table, preset.name, missing)
    return CompiledSource(
        name=settings.name or table,
        preset=preset.name,
        table=table,
        sql=sql,
        params={
            "ignore_sessions": list(settings.ignore_sessions),
            "own_service": OWN_SERVICE_NAME,
        },
        columns={key: expr.sql for key, expr in columns.items()},
        typed=typed_columns(columns),
        session_in_payload=preset.session_in_payload and "session_id" not in settings.columns,
        dims=dims,
        dims_sql=dims_sql,
    )


def _latency_invalid(preset: Preset, settings: SourceSettings) -> str:
    """1 when the event carries a latency that is not a finite, non-negative number."""
    bad_number = "(_lat IS NOT NULL AND NOT (isFinite(assumeNotNull(_lat)) AND _lat >= 0))"
    if preset.latency_raw is None or "latency_ms" in settings.columns:
        return f"toUInt8{bad_number}"
    raw = preset.latency_raw.sql
    unparsable = (
        f"(({raw}) NOT IN ('', 'null') AND toFloat64OrNull(replaceAll({raw}, '\"', '')) IS NULL)"
    )
    return f"toUInt8({bad_number} OR {unparsable})"


class MissingColumnsError(Exception):
    """The table lacks columns the preset reads (turned into a StoreError by the caller)."""

    def __init__(self, table: str, preset: str, missing: list[str]) -> None:
        self.table, self.preset, self.missing = table, preset, missing
        super().__init__(
            f"table {table} has no column {', '.join(missing)} (the {preset} preset reads it;"
            " map your own under [source.columns])"
        )


def open_source(
    store: Store, settings: SourceSettings, scopes: Mapping[str, str] | None = None
) -> CompiledSource:
    """Compile the source against the live table, naming what is missing as a StoreError."""
    table = settings.table_name
    present = set(store.table_columns(table))
    try:
        return compile_source(settings, present, scopes)
    except MissingColumnsError as exc:
        raise StoreError(store.url.masked, str(exc)) from None
