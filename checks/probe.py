"""`config check`'s probe of the configured source on the live store: every piece the watchdog
runs compiled against the real table with `LIMIT 0`, each failure named by its config key
(exit 2 for what the user wrote, 3 for what the table lacks; docs/configuration.md#validation).
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.kinds import session_scopes, spec_of
from checks.presets import LB, SOURCE_ALIAS
from checks.scans.binder import merged
from checks.server_words import server_words
from checks.sources import (
    CompiledSource,
    SourceSchemaError,
    compile_source,
    telemetry_elsewhere,
)
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store


@dataclass(frozen=True)
class Finding:
    """One probe: the key it concerns, and what is wrong (empty when it compiled)."""

    key: str
    problem: str = ""
    config: bool = False  # the user's own key is at fault (exit 2), else the store (exit 3)
    label: str = ""  # what was probed, for a list of what compiled (default: the key)

    @property
    def ok(self) -> bool:
        return not self.problem


@dataclass(frozen=True)
class Probe:
    """What probing the source found, in the order it was probed."""

    table: str
    columns: int  # raw columns of the table (0 when it is missing)
    findings: tuple[Finding, ...]

    @property
    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.ok)


def _compiles(store: Store, sql: str, params: dict[str, object] | None = None) -> str:
    """'' when ClickHouse analyses `sql` (run with LIMIT 0), else its words."""
    try:
        store.query(sql, params or {})
    except StoreError as exc:
        return server_words(exc.problem)
    return ""


def session_filters(settings: Settings) -> dict[str, str]:
    """Every session filter of the config, by the key that holds it."""
    found = {}
    if settings.source.session_filter:
        found["source.session_filter"] = settings.source.session_filter
    for index, check in enumerate(settings.custom_checks):
        predicate = session_scopes([spec_of(settings.plugins, check)]).get(check.id)
        if predicate:
            found[f"checks.custom[{index}].session_filter"] = predicate
    return found


def probe_source(store: Store, settings: Settings) -> Probe:
    """Probe every piece of the configured source on `store`; a StoreError only if it is down."""
    source = settings.source
    table = source.table_name
    try:
        types = store.table_columns(table)
    except StoreError as exc:
        if "not found" not in exc.problem:
            raise
        elsewhere = telemetry_elsewhere(store, table, settings.plugins.presets)
        finding = Finding("source.table", f"table {table} not found ({exc.url_masked}){elsewhere}")
        return Probe(table, 0, (finding,))
    try:
        compiled = compile_source(source, types)
    except SourceSchemaError as exc:
        return Probe(table, len(types), (Finding("source.preset", str(exc)),))
    findings = [_column(store, settings, compiled, key) for key in compiled.typed]
    if "ts" in source.columns:  # the read range compares it with a time: it must be one
        problem = _compiles(
            store,
            f"SELECT 1 FROM {table} AS {SOURCE_ALIAS} WHERE ({source.columns['ts']}) >= {LB} LIMIT 0",
            {"lb_ms": 0},
        )
        failed = problem and f"is not a time the read range can compare: {problem}"
        findings.append(Finding("source.columns.ts", failed, True, label="ts (yours) as a time"))
    for key, predicate in session_filters(settings).items():
        problem = _compiles(
            store, f"SELECT toUInt8(({predicate}) != 0) FROM {table} AS {SOURCE_ALIAS} LIMIT 0"
        )
        findings.append(Finding(key, problem and f"does not compile: {problem}", True))
    if all(f.ok for f in findings):
        problem = _compiles(
            store,
            f"SELECT * FROM ({compiled.sql}) LIMIT 0",
            merged(compiled.params, {"lb_ms": 0, "at_ms": 0}),
        )
        failed = problem and f"the source query fails: {problem}"
        findings.append(Finding("source", failed, label="the source query"))
    return Probe(table, len(types), tuple(findings))


def _column(store: Store, settings: Settings, compiled: CompiledSource, key: str) -> Finding:
    """One normalized column, converted to its type as the source query does."""
    sql = f"SELECT {compiled.typed[key]} AS {key} FROM {compiled.table} AS {SOURCE_ALIAS} LIMIT 0"
    problem = _compiles(store, sql)
    if key in settings.source.columns:
        failed = problem and f"does not compile: {problem}"
        return Finding(f"source.columns.{key}", failed, True, label=f"{key} (yours)")
    where = f"the {settings.source.preset} preset's {key} cannot read {compiled.table}"
    return Finding("source.preset", problem and f"{where}: {problem}", label=key)
