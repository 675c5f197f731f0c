"""The otel_logs preset: the OpenTelemetry Collector ClickHouse exporter's logs table, which the
OTLP receiver writes too (docs/sources.md#the-exporters-layouts)."""

from __future__ import annotations

from checks.otel import logs_preset
from checks.presets import PresetPlugin

PRESET = PresetPlugin("otel_logs", "otel.otel_logs", logs_preset, signal="logs")
