"""The otel_logs (both generations) and otel_traces presets give the joelclaw verdicts."""

from __future__ import annotations

from checks.base import Status
from checks.sources import OWN_SERVICE_NAME
from tests.builder import (
    T0,
    H,
    M,
    S,
    Scenario,
    evaluate_table,
    unique_table,
)
from tests.exporter import Span, write_otel_logs, write_otel_traces
from watchdog.core.store import Store

AT = T0 + 4 * H


def _scenario() -> Scenario:
    sc = Scenario()
    sc.session("warm").starts(T0 + H).recalls(T0 + H + S, latency_ms=4000).ends(
        T0 + 2 * H
    ).observes(T0 + 2 * H + M)
    sc.session("cold").starts(T0 + H).ends(T0 + 2 * H)
    sc.session("dev").starts(T0 + H).deviates(
        T0 + H + M, {"agente": "po", "tipo": "laco", "evidenceEventIds": ["ghost"]}
    )
    return sc


def _verdicts(report):  # type: ignore[no-untyped-def]
    return {k: (v.status, v.value) for k, v in report.checks.items() if k != "telemetry_freshness"}


def _otel_logs(store: Store, **kwargs: bool):  # type: ignore[no-untyped-def]
    table = unique_table()
    write_otel_logs(store, table, _scenario(), **kwargs)
    return evaluate_table(store, table, AT, {"source": {"preset": "otel_logs"}})


def test_otel_logs_current_schema(store: Store) -> None:
    """The current exporter schema (EventName column) reads like the joelclaw table."""
    report = _otel_logs(store)
    assert report.checks["recall_coverage"].value == 2
    assert report.checks["observe_coverage"].value == 1
    assert report.checks["agent_deviation_evidence"].status is Status.BREACHED


def test_otel_logs_legacy_schema(store: Store) -> None:
    """The older generation (TimestampTime, no EventName column) gives the same verdicts."""
    assert _verdicts(_otel_logs(store, legacy=True)) == _verdicts(_otel_logs(store))


def test_otel_logs_empty_event_name_falls_back_to_attribute(store: Store) -> None:
    """EventName empty: the name comes from LogAttributes['event.name']."""
    assert _verdicts(_otel_logs(store, name_in_attributes=True)) == _verdicts(_otel_logs(store))


def test_otel_logs_latency_and_deviation_as_attribute_text(store: Store) -> None:
    """Attribute values are strings: latency parses, evidence ids as JSON text are an array."""
    report = _otel_logs(store)
    assert report.checks["recall_latency_p95"].value == 4000
    assert report.checks["agent_deviation_contract"].value == 0


def test_otel_traces_spans_yield_start_and_outcome(store: Store) -> None:
    """A memory.recall span yields started and completed/failed events; Error and STATUS_CODE_ERROR fail."""
    table = unique_table()
    spans = [Span("memory.recall", T0 + H + i * M, 500.0, f"s{i}") for i in range(17)]
    spans += [Span("memory.recall", T0 + 2 * H, 2500.0, "e1", status="Error")]
    spans += [Span("memory.recall", T0 + 2 * H + S, 2500.0, "e2", status="STATUS_CODE_ERROR")]
    spans += [Span("memory.recall", T0 + 2 * H + 2 * S, 9000.0, "e3", status="Error")]
    write_otel_traces(store, table, spans)
    report = evaluate_table(store, table, AT, {"source": {"preset": "otel_traces"}})
    rate = report.checks["recall_failure_rate"]
    assert (rate.status, rate.value, rate.sample_size) == (Status.BREACHED, 3 / 20, 20)
    assert report.checks["recall_coverage"].value == 0
    p95 = report.checks["recall_latency_p95"]
    assert (p95.sample_size, p95.value) == (17, 500)
    assert report.checks["circuit_breaker"].value == 3


def test_the_watchdogs_own_telemetry_is_never_agent_telemetry(store: Store) -> None:
    """Rows of service memory-watchdog (its own OTLP export) count for no check, freshness included."""
    table = unique_table()
    write_otel_logs(store, table, _scenario())
    before = evaluate_table(store, table, AT, {"source": {"preset": "otel_logs"}})
    store.insert(  # a fresh event of a session without recall: would change two verdicts
        table,
        [[AT - M, OWN_SERVICE_NAME, "INFO", {"session.id": "watchdog-run"}, {}, "watchdog.run"]],
        [
            "Timestamp",
            "ServiceName",
            "SeverityText",
            "LogAttributes",
            "ResourceAttributes",
            "EventName",
        ],
    )
    after = evaluate_table(store, table, AT, {"source": {"preset": "otel_logs"}})
    assert after.to_json()["checks"] == before.to_json()["checks"]


def test_freshness_past_the_lookback_on_a_nanosecond_table(store: Store) -> None:
    """otel_logs (DateTime64(9)) with events only before the lookback: freshness finds the newest
    (the whole-table read range once overflowed the conversion and errored every session check)."""
    table = unique_table()
    write_otel_logs(store, table, _scenario())
    report = evaluate_table(store, table, AT + 30 * H, {"source": {"preset": "otel_logs"}})
    freshness = report.checks["telemetry_freshness"]
    assert freshness.status is Status.BREACHED
    assert report.checks["recall_coverage"].status is Status.NO_DATA
