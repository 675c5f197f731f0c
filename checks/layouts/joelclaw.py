"""The joelclaw preset: the `joelclaw.otel_events` table of the joelclaw system
(docs/spec.md#2-data-sources-presets-the-normalized-event)."""

from __future__ import annotations

from checks.presets import JOELCLAW, PresetPlugin

PRESET = PresetPlugin("joelclaw", "joelclaw.otel_events", lambda types, keys: JOELCLAW)
