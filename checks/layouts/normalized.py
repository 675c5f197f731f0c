"""The normalized preset: a table (or view) of the normalized event's own columns, such as the
narrow table `schema apply --materialize` keeps (docs/sources.md#mapping-your-own-table)."""

from __future__ import annotations

from checks.presets import NORMALIZED, PresetPlugin

PRESET = PresetPlugin(
    "normalized", "watchdog.memory_events", lambda types, keys: NORMALIZED, written=False
)
