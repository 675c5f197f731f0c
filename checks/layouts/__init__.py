"""The presets, one module each, each declaring its `PRESET` (a `checks.presets.PresetPlugin`):
`PRESETS`, found by scanning this package, so a new preset is one module and no list is edited
(docs/development.md#adding-a-telemetry-layout-a-preset).
"""

from __future__ import annotations

from checks.presets import PresetPlugin
from watchdog.core.settings.plugins import scanned

PRESETS: tuple[PresetPlugin, ...] = tuple(scanned(__name__, "PRESET", PresetPlugin))
