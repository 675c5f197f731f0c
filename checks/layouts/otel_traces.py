"""The otel_traces preset: the OpenTelemetry Collector ClickHouse exporter's traces table, one
span a start and an end event (docs/sources.md#the-exporters-layouts)."""

from __future__ import annotations

from checks.otel import traces_preset
from checks.presets import PresetPlugin

PRESET = PresetPlugin("otel_traces", "otel.otel_traces", traces_preset, signal="traces")
