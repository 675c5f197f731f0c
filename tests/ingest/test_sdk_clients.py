"""The OpenTelemetry SDK's own OTLP exporters (HTTP and gRPC) through the receiver give the direct-insert verdicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checks.base import Report, Status
from tests.builder import T0, H, M, S, Scenario, evaluate_table, unique_table
from tests.exporter import Span, write_otel_logs, write_otel_traces
from tests.ingest.conftest import Receiving
from tests.ingest.sdk import send_logs, send_logs_grpc, send_spans
from watchdog.core.store import Store

AT = T0 + 4 * H
LOGS = {"source": {"preset": "otel_logs"}}
TRACES = {"source": {"preset": "otel_traces"}}


def memory_events() -> Scenario:
    """Recalls, observes, compactions, session ends and deviations, healthy and faulty."""
    sc = Scenario()
    for i in range(6):
        t = T0 + H + i * 5 * M
        sc.session(f"warm{i}").starts(t).recalls(
            t + S, latency_ms=700 + 100 * i, result_count=2
        ).injects(t + 2 * S).compacts(t + 10 * M).observes(t + 10 * M + S).ends(
            t + 30 * M
        ).observes(t + 30 * M + S)
    sc.session("cold").starts(T0 + H).ends(T0 + 2 * H).observes(T0 + 2 * H + S)
    sc.session("late").starts(T0 + H).recalls(T0 + H + 9 * M).ends(T0 + 2 * H).observes(
        T0 + 2 * H + S
    )
    sc.session("slow").starts(T0 + H).recalls(T0 + H + S, latency_ms=5200.5)
    sc.session("crashed").starts(T0 + H).recalls(T0 + H + S).compacts(T0 + H + 20 * M)
    sc.session("failing").starts(T0 + H).recalls(T0 + H + S).ends(T0 + 2 * H).observes(
        T0 + 2 * H + S, fails=True
    )
    sc.session("lost").starts(T0 + H).recalls(T0 + H + S).ends(T0 + 2 * H).observes(
        T0 + 2 * H + S, lost=True
    )
    dev = sc.session("dev").starts(T0 + H).recalls(T0 + H + S)
    real = sc.events[-1].id
    dev.deviates(T0 + H + M, {"agente": "po", "tipo": "laco", "evidenceEventIds": [real]})
    dev.deviates(T0 + H + 2 * M, {"agente": "dev", "tipo": "laco", "evidenceEventIds": ["ghost"]})
    dev.deviates(T0 + H + 3 * M, {"agente": "po", "tipo": "bogus", "evidenceEventIds": []})
    dev.deviates(T0 + H + 4 * M, {"agente": "po", "tipo": "laco", "email": "a@b.c"})
    sc.duplicate(sc.events[3])  # an outbox retry: the same event id written twice
    return sc


def verdicts(report: Report) -> dict[str, Any]:
    """Each check's status, value, sample size and evidence; the data-quality counts."""
    checks = {
        check_id: (r.status, r.value, r.sample_size, r.evidence.to_json())
        for check_id, r in report.checks.items()
    }
    return {"checks": checks, "data_quality": dict(report.data_quality)}


def test_sdk_log_exporter_gives_the_direct_insert_verdicts(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Memory events sent by the SDK's OTLP log exporter are judged as the same rows inserted directly."""
    direct = unique_table()
    write_otel_logs(store, direct, memory_events())
    receiver = receiving()
    assert send_logs(receiver.endpoint, memory_events())
    receiver.load()
    expected = evaluate_table(store, direct, AT, LOGS)
    got = evaluate_table(store, receiver.logs_table, AT, LOGS)
    assert verdicts(got) == verdicts(expected)
    assert got.checks["recall_coverage"].status is Status.BREACHED  # the scenario is not all green


def test_sdk_log_exporter_with_gzip_gives_the_same_rows(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A gzip-compressed export stores the very rows an uncompressed one does."""
    plain, packed = receiving(), receiving()
    assert send_logs(plain.endpoint, memory_events())
    assert send_logs(packed.endpoint, memory_events(), gzip=True)
    plain.load()
    packed.load()
    rows = "SELECT * EXCEPT ResourceAttributes FROM {table} ORDER BY Timestamp, LogAttributes['event.id']"
    assert (
        store.query(rows.format(table=packed.logs_table)).rows
        == store.query(rows.format(table=plain.logs_table)).rows
    )


def test_sdk_span_exporter_gives_the_direct_insert_verdicts(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Spans sent by the SDK's OTLP span exporter are judged as the same spans inserted directly."""
    spans = [Span("memory.recall", T0 + H + i * M, 400.0 + 50 * i, f"s{i}") for i in range(15)]
    spans += [Span("memory.recall", T0 + 2 * H, 4500.0, "e1", status="Error")]
    spans += [Span("memory.observe", T0 + 2 * H + i * S, 900.0, f"o{i}") for i in range(5)]
    spans += [Span("memory.observe", T0 + 3 * H, 1200.0, "o9", status="Error")]
    direct = unique_table()
    write_otel_traces(store, direct, spans)
    receiver = receiving()
    assert send_spans(receiver.endpoint, spans)
    receiver.load()
    config = {**TRACES, "events": {"observe_completed": ["memory.observe.completed"]}}
    expected = evaluate_table(store, direct, AT, config)
    got = evaluate_table(store, receiver.traces_table, AT, config)
    # Span ids (and so the evidence's event ids) are the SDK's own: compare the verdicts.
    strip = {k: v[:3] for k, v in verdicts(got)["checks"].items()}
    assert strip == {k: v[:3] for k, v in verdicts(expected)["checks"].items()}
    assert got.checks["recall_failure_rate"].value == expected.checks["recall_failure_rate"].value


def test_sdk_grpc_log_exporter_gives_the_direct_insert_verdicts(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Memory events sent by the SDK's OTLP/gRPC log exporter (gzip) are judged as the same rows
    inserted directly."""
    direct = unique_table()
    write_otel_logs(store, direct, memory_events())
    receiver = receiving(grpc=True)
    assert send_logs_grpc(receiver.grpc_target, memory_events(), gzip=True)
    receiver.load()
    expected = evaluate_table(store, direct, AT, LOGS)
    got = evaluate_table(store, receiver.logs_table, AT, LOGS)
    assert verdicts(got) == verdicts(expected)


def test_sdk_grpc_span_exporter_gives_the_direct_insert_verdicts(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Spans sent by the SDK's OTLP/gRPC span exporter are judged as the same spans inserted directly."""
    spans = [Span("memory.recall", T0 + H + i * M, 400.0 + 50 * i, f"s{i}") for i in range(15)]
    spans += [Span("memory.recall", T0 + 2 * H, 4500.0, "e1", status="Error")]
    direct = unique_table()
    write_otel_traces(store, direct, spans)
    receiver = receiving(grpc=True)
    assert send_spans(receiver.grpc_target, spans, grpc=True)
    receiver.load()
    expected = evaluate_table(store, direct, AT, TRACES)
    got = evaluate_table(store, receiver.traces_table, AT, TRACES)
    strip = {k: v[:3] for k, v in verdicts(got)["checks"].items()}
    assert strip == {k: v[:3] for k, v in verdicts(expected)["checks"].items()}
