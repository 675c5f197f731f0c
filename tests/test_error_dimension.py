"""The error class is a triage dimension of every preset, read from configurable keys."""

from __future__ import annotations

from typing import Any

import pytest

from checks.base import Report, Status
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from tests.exporter import Span, write_otel_logs, write_otel_traces
from watchdog.core.errors import ConfigError
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
RATES = {"observe_failure_rate": {"min_samples": 0}, "recall_failure_rate": {"min_samples": 0}}


def failed_observes(attributes: dict[str, Any], n: int = 3) -> Scenario:
    """`n` sessions whose observe failed, each failure carrying `attributes`; 3 that completed."""
    sc = Scenario()
    for i in range(n):
        s = sc.session(f"f{i}").starts(T0 + H + i * M).recalls(T0 + H + i * M + S)
        s.emits("memory.observe.requested", T0 + H + i * M + 2 * S)
        s.emits("memory.observe.failed", T0 + H + i * M + 3 * S, success=0, meta=dict(attributes))
    for i in range(3):
        s = sc.session(f"ok{i}").starts(T0 + 2 * H + i * M).recalls(T0 + 2 * H + i * M + S)
        s.observes(T0 + 2 * H + i * M + 2 * S)
    return sc


def triaged(store: Store, table: str, source: dict[str, Any]) -> Report:
    settings = settings_for(table, {"source": {**source, "table": table}, "checks": RATES})
    return run_once(store, settings, window_at(settings, AT), triage=True)


def error_groups(report: Report, check_id: str) -> list[tuple[str, int]]:
    """The `error` dimension's groups of the check's triage ([] when it has none)."""
    assert report.checks[check_id].status is Status.BREACHED
    found = {d.name: d for d in report.triage[check_id].dimensions}
    return [(g.value, g.count) for g in found["error"].groups] if "error" in found else []


@pytest.mark.parametrize("key", ["error", "error.type", "exception.type"])
@pytest.mark.parametrize("layout", ["otel_logs", "otel_logs_json"])
def test_otel_logs_triage_shows_the_error_attribute(store: Store, key: str, layout: str) -> None:
    """A failed observe's `error`, `error.type` or `exception.type` attribute (the OTel
    semantic conventions) is its error class in the otel_logs triage, by default."""
    table = unique_table().replace("otel_events", "otel_logs")
    write_otel_logs(store, table, failed_observes({key: "qdrant timeout"}), layout=layout)
    report = triaged(store, table, {"preset": "otel_logs"})
    assert error_groups(report, "observe_failure_rate") == [("qdrant timeout", 3)]


def test_the_first_present_error_key_wins(store: Store) -> None:
    """With several error keys present, the first of `source.error_keys` is the class."""
    table = unique_table().replace("otel_events", "otel_logs")
    attributes = {"error": "qdrant timeout after 30s", "error.type": "TimeoutError"}
    write_otel_logs(store, table, failed_observes(attributes))
    report = triaged(store, table, {"preset": "otel_logs"})
    assert error_groups(report, "observe_failure_rate") == [("TimeoutError", 3)]
    report = triaged(store, table, {"preset": "otel_logs", "error_keys": ["error"]})
    assert error_groups(report, "observe_failure_rate") == [("qdrant timeout after <n>", 3)]


def test_error_keys_are_configurable(store: Store) -> None:
    """`source.error_keys` replaces the default keys: another attribute becomes the class."""
    table = unique_table().replace("otel_events", "otel_logs")
    write_otel_logs(store, table, failed_observes({"failure.reason": "disk full"}))
    assert (
        error_groups(triaged(store, table, {"preset": "otel_logs"}), "observe_failure_rate") == []
    )
    report = triaged(store, table, {"preset": "otel_logs", "error_keys": ["failure.reason"]})
    assert error_groups(report, "observe_failure_rate") == [("disk full", 3)]


def test_otel_traces_triage_shows_the_spans_error_type(store: Store) -> None:
    """A failed span's `error.type` attribute is its error class in the otel_traces triage."""
    spans = [
        Span("memory.recall", T0 + H + i * M, 100, f"s{i}", "Error", {"error.type": "timeout"})
        for i in range(4)
    ]
    spans += [Span("memory.recall", T0 + 2 * H + i * M, 100, f"t{i}") for i in range(4)]
    table = unique_table().replace("otel_events", "otel_traces")
    write_otel_traces(store, table, spans)
    report = triaged(store, table, {"preset": "otel_traces"})
    assert error_groups(report, "recall_failure_rate") == [("timeout", 4)]


def test_joelclaw_reads_its_error_column_then_the_configured_metadata_keys(store: Store) -> None:
    """joelclaw's class is its `error` column; with `error_keys`, a metadata key where the
    column is empty."""
    sc = failed_observes({"error.type": "TimeoutError"}, n=2)
    sc.session("col").emits("memory.observe.requested", T0 + 3 * H).emits(
        "memory.observe.failed", T0 + 3 * H + S, success=0, error="store failed"
    )
    table = unique_table()
    sc.write(store, table)
    report = triaged(store, table, {})
    assert error_groups(report, "observe_failure_rate") == [("", 2), ("store failed", 1)]
    report = triaged(store, table, {"error_keys": ["error.type"]})
    assert error_groups(report, "observe_failure_rate") == [
        ("TimeoutError", 2),
        ("store failed", 1),
    ]


def test_an_error_dimension_no_failing_event_carries_is_left_out(store: Store) -> None:
    """Where no failing event has an error class, the triage shows no empty error group."""
    table = unique_table().replace("otel_events", "otel_logs")
    write_otel_logs(store, table, failed_observes({}))
    report = triaged(store, table, {"preset": "otel_logs"})
    names = [d.name for d in report.triage["observe_failure_rate"].dimensions]
    assert names == ["outcome", "ServiceName", "SeverityText"]


def test_error_keys_must_be_attribute_keys() -> None:
    """An empty list or a key with control characters is a config error naming the key."""
    with pytest.raises(ConfigError, match=r"source.error_keys: "):
        settings_from_mapping({"source": {"error_keys": []}}, plugins=PLUGINS, env={})
    with pytest.raises(ConfigError, match=r"source.error_keys: "):
        settings_from_mapping({"source": {"error_keys": ["a\nb"]}}, plugins=PLUGINS, env={})
