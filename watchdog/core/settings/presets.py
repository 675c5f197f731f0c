"""The presets by name: the facts about each table layout that config, ingest and checks share.

Each preset's column expressions live in `checks.sources` (keyed by these
names); what the settings validate and default, what the OTLP receiver
writes, and whose rows may be the watchdog's own telemetry are here, once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PresetFacts:
    """One preset: its name, its table when `source.table` is unset, what kind of table it is."""

    name: str
    table: str
    # The OpenTelemetry Collector ClickHouse exporter's table of this OTLP signal (the
    # receiver writes it): session ids come from attribute keys (`source.session_keys`),
    # and the watchdog's own telemetry (service.name memory-watchdog) may land in it.
    signal: str | None = None

    @property
    def exporter(self) -> bool:
        return self.signal is not None


PRESETS: dict[str, PresetFacts] = {
    facts.name: facts
    for facts in (
        PresetFacts("joelclaw", "joelclaw.otel_events"),
        PresetFacts("otel_logs", "otel.otel_logs", signal="logs"),
        PresetFacts("otel_traces", "otel.otel_traces", signal="traces"),
        PresetFacts("normalized", "watchdog.memory_events"),
    )
}
EXPORTER_PRESETS = tuple(name for name, facts in PRESETS.items() if facts.exporter)
