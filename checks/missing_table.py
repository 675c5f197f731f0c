"""A source table that is missing: the presets' tables the store holds instead, and how to read one.

`check` on a store where `daemon --otlp` wrote `otel.otel_logs` while the config names the joelclaw
preset says "table joelclaw.otel_events not found; otel.otel_logs holds OTLP logs: ..."
(docs/configuration.md#the-default-source).
"""

from __future__ import annotations

from collections.abc import Sequence

from checks.presets import PresetPlugin
from watchdog.core.errors import StoreError
from watchdog.core.settings.plugins import PresetEntry
from watchdog.core.store import Store


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
