"""Sources: each preset (`checks.layouts`, as the settings' registry holds it) compiles
to one SQL subquery yielding the normalized event of docs/spec.md section 2, plus `t` (epoch
ms) and `in_scope`, over the bound read range `[lb_ms, at_ms)`; column expressions are SQL by
design (docs/sources.md#mapping-your-own-table), data values never are. `open_source` compiles
one against the live table; when that table is missing, its error names the presets' tables the
store holds instead (`otel.otel_logs` after `daemon --otlp`) and how to read one
(docs/configuration.md#the-default-source).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checks.presets import (
    AT,
    LB,
    NO_ID_HINT,
    PAYLOAD_OBJECT,
    PAYLOAD_UTF8,
    SOURCE_ALIAS,
    Expr,
    Preset,
    PresetPlugin,
)
from checks.scans.binder import merged
from checks.server_words import server_words
from checks.sharding import Sharding, sharding_of
from watchdog.core.errors import ConfigError, RegistryError, StoreError
from watchdog.core.settings import SourceSettings
from watchdog.core.settings.plugins import PresetEntry
from watchdog.core.sql import quoted
from watchdog.core.store import Store

# service.name of the watchdog's own OpenTelemetry (watchdog.daemon.telemetry uses it).
OWN_SERVICE_NAME = "memory-watchdog"


def preset_for(settings: SourceSettings, types: Mapping[str, str] | None) -> Preset:
    """The configured preset for a table with these column types (None: its usual layout)."""
    plugin = settings.facts
    if not isinstance(plugin, PresetPlugin):
        raise RegistryError(f"preset {settings.preset!r} is registered without its builder")
    built = plugin.build(types, settings.session_keys)
    return built.with_error_keys(settings.error_keys)


def _own_telemetry(settings: SourceSettings, columns: Mapping[str, str] | None) -> bool:
    """Whether the watchdog's own telemetry may be among the table's rows (to be left out)."""
    exporter = settings.facts.signal is not None
    return exporter and columns is not None and "ServiceName" in columns


Item = tuple[str, str]  # (alias, SQL): a column of the normalized event


@dataclass(frozen=True)
class CompiledSource:
    """A source ready to query: the normalized events as a flat relation, and its parameters.

    The relation is its columns (`items`, each an alias over the raw
    columns), the table it reads (`table`, with `joined`: the preset's
    ARRAY JOIN) and the read range (`where`). A scan groups directly over
    it (`select`): on a `Distributed` table ClickHouse then aggregates on
    every shard and merges the partial states on the initiator
    (docs/architecture.md#aggregation-where-the-data-lives).
    """

    name: str
    preset: str
    table: str
    items: tuple[Item, ...]
    where: str
    params: Mapping[str, Any]
    columns: Mapping[str, str]  # normalized column -> expression, for benchmarks and docs
    typed: Mapping[str, str] = field(default_factory=dict)  # the same, converted (typed_columns)
    session_in_payload: bool = False  # Preset.session_in_payload
    dims: Mapping[str, str] = field(default_factory=dict)  # triage dimension -> expression
    array_join: str = ""  # the preset's: one raw row may yield more than one event
    state: str = ""  # `source.state`: the per-session state table (checks.state), if read
    session_filter: str = ""  # `source.session_filter`, as configured (the state's guard)
    # With `state`: the narrow table beside it, as a source (`compile_narrow`): every read of
    # events but the session scans' (windows, deviations, evidence ids, triage) reads it.
    narrow: CompiledSource | None = None
    sharding: Sharding | None = None  # `table` is Distributed (open_source reads its engine)
    state_sharding: Sharding | None = None  # the same of `state`

    @property
    def events_source(self) -> CompiledSource:
        """Where this source's events are read: the narrow table beside the state, else itself."""
        return self.narrow or self

    def dim_items(self) -> tuple[Item, ...]:
        """A `dim_<name>` column per triage dimension."""
        return tuple((f"dim_{name}", f"toString({expr})") for name, expr in self.dims.items())

    def select(
        self,
        columns: str,
        *,
        where: str = "",
        group: str = "",
        dims: bool = False,
        terms: Sequence[Item] = (),
        join: str = "",
        table: str | None = None,
    ) -> str:
        """A query over the events read directly from the table: `columns` (SQL over the
        normalized columns, `terms` and, with `dims`, the dimensions), the events meeting
        `where` too, grouped by `group`, with `join` (an ARRAY JOIN) after the preset's.

        The normalized columns are WITH aliases, so the query groups over the table
        itself, never over a subquery of it; `table` reads another table of the same
        layout (a shard's own).
        """
        items = [*self.items, *(self.dim_items() if dims else ()), *terms]
        aliases = ",\n    ".join(f"{sql} AS {alias}" for alias, sql in items)
        conditions = " AND ".join(f"({c})" for c in (self.where, where) if c)
        filtered = f"\nWHERE {conditions}" if conditions else ""
        grouped = f"\nGROUP BY {group}" if group else ""
        source = f"{table or self.table} AS {SOURCE_ALIAS} {self.array_join} {join}".rstrip()
        return f"WITH\n    {aliases}\nSELECT {columns}\nFROM {source}{filtered}{grouped}"

    def _listed(self, dims: bool) -> str:
        items = [*self.items, *(self.dim_items() if dims else ())]
        columns = ",\n    ".join(f"{sql} AS {alias}" for alias, sql in items)
        source = f"{self.table} AS {SOURCE_ALIAS} {self.array_join}".rstrip()
        return f"SELECT\n    {columns}\nFROM {source}\nWHERE {self.where}"

    @property
    def sql(self) -> str:
        """The normalized-event relation as one SELECT (for reads that group nothing)."""
        return self._listed(dims=False)

    def events_with_dims(self) -> str:
        """The normalized-event relation with the triage dimensions, as a subquery."""
        return f"({self._listed(dims=True)})"

    def events(self) -> str:
        """The normalized-event relation, as a parenthesized subquery."""
        return f"({self.sql})"

    def on_shards(self) -> CompiledSource | None:
        """The same source on each shard's own table, when its rows are sharded by session."""
        if self.sharding is None or not self.sharding.by_session:
            return None
        return replace(self, table=self.sharding.local, sharding=None)


# How each normalized column's expression is converted to the column's type.
_CONVERT: dict[str, Callable[[str], str]] = {
    "event_id": lambda sql: f"toString({sql})",
    "ts": lambda sql: f"toDateTime64({sql}, 3, 'UTC')",
    "session_id": lambda sql: f"toString({sql})",
    "name": lambda sql: f"toString({sql})",
    "latency_ms": lambda sql: f"toFloat64OrNull(toString({sql}))",
    "trigger": lambda sql: f"toString({sql})",
    "result_count": lambda sql: f"toInt64OrNull(toString({sql}))",
    "payload": lambda sql: f"toString({sql})",
}


def typed_columns(columns: Mapping[str, Expr]) -> dict[str, str]:
    """Each normalized column as the SQL that converts its expression to the column's type.

    The compiled source and the narrow table (`checks.materialize`) both use
    these, so what the normalized preset reads back is what the raw preset
    would have computed. The session id is before the ignore list, the
    latency before the finite-and-not-negative rule: both are applied at read.
    """
    return {key: convert(columns[key].sql) for key, convert in _CONVERT.items()}


@dataclass(frozen=True)
class _Resolved:
    """The preset's expressions for one table, with the config's overrides applied."""

    columns: dict[str, Expr]
    ts_filter: Expr
    payload_object: Expr
    payload_utf8: Expr
    id_hint: Expr


def _resolve(preset: Preset, settings: SourceSettings) -> _Resolved:
    columns = dict(preset.columns)
    ts_filter = preset.ts_filter
    for key, sql in settings.columns.items():
        columns[key] = Expr(sql)
    if "ts" in settings.columns:
        # The read range then follows the user's own time expression.
        ts = settings.columns["ts"]
        ts_filter = Expr(f"({ts}) >= {LB} AND ({ts}) < {AT}")
    payload_object, payload_utf8 = preset.payload_object, preset.payload_utf8
    if "payload" in settings.columns:  # the user's own payload: parse it
        payload_object, payload_utf8 = PAYLOAD_OBJECT, PAYLOAD_UTF8
    id_hint = NO_ID_HINT if "event_id" in settings.columns else preset.event_id_hint
    return _Resolved(columns, ts_filter, payload_object, payload_utf8, id_hint)


def _select_items(
    preset: Preset,
    settings: SourceSettings,
    resolved: _Resolved,
    scopes: Mapping[str, str] | None,
    ignore: str = "{ignore_sessions:Array(String)}",
) -> list[Item]:
    typed = typed_columns(resolved.columns)
    scope = (
        f"toUInt8(({settings.session_filter}) != 0)" if settings.session_filter else "toUInt8(1)"
    )
    return [
        ("event_id", typed["event_id"]),
        ("ts", typed["ts"]),
        ("t", "toUnixTimestamp64Milli(ts)"),
        ("_session_raw", typed["session_id"]),
        ("session_id", f"if(_session_raw IN {ignore}, '', _session_raw)"),
        ("name", typed["name"]),
        # Negative, NaN and infinite latencies are not latencies: NULL.
        ("latency_ms", "if(isFinite(assumeNotNull(_lat)) AND _lat >= 0, _lat, NULL)"),
        ("_lat", typed["latency_ms"]),
        ("trigger", typed["trigger"]),
        ("result_count", typed["result_count"]),
        ("payload", typed["payload"]),
        ("in_scope", scope),
        ("latency_invalid", _latency_invalid(preset, settings)),
        ("event_id_hint", f"toString({resolved.id_hint.sql})"),
        ("payload_is_object", f"toUInt8({resolved.payload_object.sql})"),
        ("payload_is_utf8", f"toUInt8({resolved.payload_utf8.sql})"),
        *((f"scope_{name}", f"toUInt8(({sql}) != 0)") for name, sql in (scopes or {}).items()),
    ]


def compile_source(
    settings: SourceSettings,
    types: Mapping[str, str] | None = None,
    scopes: Mapping[str, str] | None = None,
) -> CompiledSource:
    """Compile the configured source; `types` is the table's raw columns and types, when known.

    The preset is built for the layout those types show (the exporter's Map
    or JSON layout, each version). A raw column the preset reads that the
    table lacks, or holds in a type the preset cannot read, is a
    SourceSchemaError. `scopes` maps a name to a SQL predicate (a check's own
    session filter): each becomes a `scope_<name>` column, like `in_scope` for
    the source's.
    """
    preset = preset_for(settings, types)
    table = settings.table_name
    resolved = _resolve(preset, settings)
    columns, ts_filter = resolved.columns, resolved.ts_filter
    if types is not None:
        reads = set(ts_filter.reads)
        for key, expr in columns.items():
            if key not in settings.columns:
                reads.update(expr.reads)
        _check_columns(table, preset, types, reads)
    present = set(types) if types is not None else None
    # The watchdog's own telemetry (exported over OTLP) may land in these very
    # tables: it is never agent telemetry, so it never counts (nor keeps a
    # silent source looking fresh).
    where = [ts_filter.sql]
    if _own_telemetry(settings, types):
        where.append("ServiceName != {own_service:String}")
    if preset.array_join:  # a span's end event may lie after `at`: it does not exist yet
        where.append("t < {at_ms:Int64}")
    # Dimensions whose columns the table lacks are left out: triage only, never an error.
    dims = {
        name: expr.sql
        for name, expr in preset.dimensions.items()
        if present is None or set(expr.reads) <= present
    }
    return CompiledSource(
        name=settings.name or table,
        preset=preset.name,
        table=table,
        items=tuple(_select_items(preset, settings, resolved, scopes)),
        where=" AND ".join(where),
        params={
            "ignore_sessions": list(settings.ignore_sessions),
            "own_service": OWN_SERVICE_NAME,
        },
        columns={key: expr.sql for key, expr in columns.items()},
        typed=typed_columns(columns),
        session_in_payload=preset.session_in_payload and "session_id" not in settings.columns,
        dims=dims,
        array_join=preset.array_join,
        state=settings.state or "",
        session_filter=settings.session_filter or "",
    )


def unbounded_sql(
    settings: SourceSettings,
    types: Mapping[str, str] | None,
    scopes: Mapping[str, str] | None,
    table: str,
    where: str = "",
) -> str:
    """The normalized events of every row of `table` (or those matching the raw `where`).

    What a materialized view reads (the narrow table's): no read range and no
    bound parameter (a view's definition cannot hold one); the ignore list is
    left to the reader, which sees `_session_raw`; with the triage dimensions.
    """
    compiled = compile_source(settings, types, scopes)  # the same schema errors
    preset = preset_for(settings, types)
    items = _select_items(
        preset, settings, _resolve(preset, settings), scopes, "CAST([] AS Array(String))"
    )
    listed = ",\n    ".join(f"{sql} AS {alias}" for alias, sql in (*items, *compiled.dim_items()))
    own = ""
    if _own_telemetry(settings, types):
        own = f"ServiceName != {quoted(OWN_SERVICE_NAME)}"
    conditions = " AND ".join(c for c in (own, where) if c)
    tail = f"\nWHERE {conditions}" if conditions else ""
    return f"SELECT\n    {listed}\nFROM {table} AS {SOURCE_ALIAS} {preset.array_join}{tail}"


def narrow_items(
    dims: Sequence[str], scopes: Sequence[str], ignore: str = "{ignore_sessions:Array(String)}"
) -> list[Item]:
    """The narrow table's rows as the normalized event: its columns read back with the same
    names the raw source gives them (the data-quality flags, scopes and dimensions as stored)."""
    at = SOURCE_ALIAS
    return [
        ("event_id", f"{at}.event_id"),
        ("ts", f"{at}.ts"),
        ("t", "toUnixTimestamp64Milli(ts)"),
        ("_session_raw", f"{at}.session_id"),
        ("session_id", f"if(_session_raw IN {ignore}, '', _session_raw)"),
        ("name", f"toString({at}.name)"),
        ("_lat", f"{at}.latency_ms"),
        ("latency_ms", "if(isFinite(assumeNotNull(_lat)) AND _lat >= 0, _lat, NULL)"),
        ("trigger", f"toString({at}.trigger)"),
        ("result_count", f"{at}.result_count"),
        ("payload", f"{at}.payload"),
        ("in_scope", f"{at}.in_scope"),
        ("latency_invalid", f"{at}.latency_invalid"),
        ("event_id_hint", f"{at}.event_id"),
        ("payload_is_object", f"{at}.payload_is_object"),
        ("payload_is_utf8", f"{at}.payload_is_utf8"),
        *((f"scope_{check}", f"toUInt8(has({at}.scopes, {quoted(check)}))") for check in scopes),
    ]


def compile_narrow(
    settings: SourceSettings, table: str, dims: Sequence[str], scopes: Mapping[str, str]
) -> CompiledSource:
    """The narrow table beside the session state (`schema apply --materialize`), as a source.

    Its rows hold the normalized event as the raw source computed it when the
    row was written, with what the raw source derives from the raw columns
    (data-quality flags, scopes, triage dimensions) stored beside it; read
    here with the same names, so every scan runs on it unchanged.
    """
    at = SOURCE_ALIAS
    return CompiledSource(
        name=settings.name or settings.table_name,
        preset="normalized",
        table=table,
        items=tuple(narrow_items(dims, list(scopes))),
        where=f"{at}.ts >= {LB} AND {at}.ts < {AT}",
        params={"ignore_sessions": list(settings.ignore_sessions)},
        columns={},
        dims=narrow_dims(dims),
    )


def narrow_dims(dims: Sequence[str]) -> dict[str, str]:
    """The triage dimensions `dims` as the narrow table stores them (its `dims` map, filled with
    what the raw preset's config computed, whichever preset reads the table now)."""
    return {d: f"{SOURCE_ALIAS}.dims[{quoted(d)}]" for d in dims}


def _check_columns(table: str, preset: Preset, types: Mapping[str, str], reads: set[str]) -> None:
    """Every raw column the preset reads exists and has a type it can read."""
    missing = sorted(reads - set(types))
    if missing:
        raise SourceSchemaError(
            f"table {table} has no column {', '.join(missing)} (the {preset.name} preset reads"
            f" {'them' if len(missing) > 1 else 'it'}; map your own under [source.columns])"
        )
    for column in sorted(reads):
        rule = preset.types.get(column)
        if rule is not None and not rule.accepts(types[column]):
            raise SourceSchemaError(
                f"table {table}: column {column} is of type {types[column]}, which the"
                f" {preset.name} preset cannot read (accepted: {rule.accepted}); map your own"
                " under [source.columns]"
            )


def _latency_invalid(preset: Preset, settings: SourceSettings) -> str:
    """1 when the event carries a latency that is not a finite, non-negative number."""
    bad_number = "(_lat IS NOT NULL AND NOT (isFinite(assumeNotNull(_lat)) AND _lat >= 0))"
    if preset.latency_unparsable is None or "latency_ms" in settings.columns:
        return f"toUInt8{bad_number}"
    return f"toUInt8({bad_number} OR {preset.latency_unparsable.sql})"


class SourceSchemaError(Exception):
    """The table lacks a column the preset reads, or holds it in a type it cannot read.

    The caller turns it into a StoreError (exit 3) naming the store.
    """


def _user_sql(settings: SourceSettings, scopes: Mapping[str, str] | None) -> dict[str, str]:
    """The SQL the config wrote, by config key, as the compiled source converts it."""
    found = {f"source.columns.{key}": _CONVERT[key](sql) for key, sql in settings.columns.items()}
    if settings.session_filter:
        found["source.session_filter"] = f"toUInt8(({settings.session_filter}) != 0)"
    for check_id, predicate in (scopes or {}).items():
        found[f"checks.custom.{check_id}.session_filter"] = f"toUInt8(({predicate}) != 0)"
    return found


def _planned(select: str) -> str:
    """A query that plans `select` and reads none of its rows.

    Counted rather than returned, so that its answer is one row: an empty
    result over HTTP reads like a response cut short (Store.query).
    """
    return f"SELECT count() AS n FROM ({select} LIMIT 0)"


def _compiles(
    store: Store, source: CompiledSource, settings: SourceSettings, scopes: Mapping[str, str] | None
) -> None:
    """Plan the compiled source without reading a row; name the config key it trips on.

    A column expression or session filter of the config that does not compile
    is a ConfigError naming its key (exit 2); anything else that keeps the
    preset from compiling is a StoreError (exit 3).
    """
    params = merged(source.params, {"lb_ms": 0, "at_ms": 0})
    try:
        store.aggregate(_planned(f"SELECT * FROM {source.events_with_dims()}"), params)
    except StoreError as exc:
        problem = exc
    else:
        return
    table = f"{source.table} AS {SOURCE_ALIAS}"
    store.aggregate(_planned(f"SELECT 1 FROM {table}"))  # the table itself answers (or raises)
    for key, sql in _user_sql(settings, scopes).items():
        try:
            store.aggregate(_planned(f"SELECT {sql} FROM {table}"))
        except StoreError as exc:
            raise ConfigError(key, f"does not compile: {server_words(exc.problem)}") from None
    raise StoreError(
        store.url.masked,
        f"the {source.preset} preset cannot read table {source.table}:"
        f" {server_words(problem.problem)}",
    ) from None


def source_columns(store: Store, table: str, presets: Sequence[PresetEntry]) -> dict[str, str]:
    """The source table's columns; a StoreError when it does not exist, naming the presets'
    tables the store does hold (`otel.otel_logs` after `daemon --otlp`) and how to read one."""
    try:
        return store.table_columns(table)
    except StoreError as exc:
        if exc.problem != f"table {table} not found":
            raise
        elsewhere = telemetry_elsewhere(store, table, presets)
        raise StoreError(exc.url_masked, exc.problem + elsewhere) from None


def telemetry_elsewhere(store: Store, missing: str, presets: Sequence[PresetEntry]) -> str:
    """`; otel.otel_logs holds OTLP logs: --config with [source] preset = "otel_logs", or the
    daemon's config`, for each preset's table the store holds; '' when it holds none."""
    # The presets whose tables a telemetry writer fills (the normalized preset's is one you
    # build: a view, or the narrow table beside the session state).
    written = [p for p in presets if isinstance(p, PresetPlugin) and p.written]
    held = [f for f in written if f.table != missing and store.has_table(f.table)]
    return "".join(
        f"; {f.table} holds {f'OTLP {f.signal}' if f.signal else f'{f.name} events'}:"
        f' --config with [source] preset = "{f.name}", or the daemon\'s config'
        for f in held
    )


def open_source(
    store: Store, settings: SourceSettings, scopes: Mapping[str, str] | None = None
) -> CompiledSource:
    """Compile the source against the live table, and make sure it compiles there.

    What the table lacks or holds in an unreadable type is a StoreError
    naming the column; a config expression that does not compile is a
    ConfigError naming its key. A `Distributed` table's sharding is read
    too: a session-sharded one judges its sessions on the shards.
    """
    types = source_columns(store, settings.table_name, settings.plugins.presets)
    try:
        source = compile_source(settings, types, scopes)
    except SourceSchemaError as exc:
        raise StoreError(store.url.masked, str(exc)) from None
    _compiles(store, source, settings, scopes)
    by_session = source.preset == "normalized" and "session_id" not in settings.columns
    sharding = sharding_of(store, source.table)
    if sharding is not None and not by_session:
        sharding = replace(sharding, by_session=False)
    source = replace(source, sharding=sharding)
    if settings.state:
        narrow = compile_narrow(
            settings, narrow_beside(settings.state), list(source.dims), scopes or {}
        )
        narrow = replace(narrow, sharding=sharding_of(store, narrow.table))
        source = replace(source, narrow=narrow, state_sharding=sharding_of(store, settings.state))
    return source


# The narrow table `schema apply --materialize` makes, in the database of the session state.
NARROW_TABLE = "memory_events"


def narrow_beside(state: str) -> str:
    """The narrow table in the database of the session state table `state`."""
    database, _, _ = state.rpartition(".")
    return f"{database}.{NARROW_TABLE}" if database else NARROW_TABLE
