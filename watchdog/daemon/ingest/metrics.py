"""The receiver's Prometheus metrics, read at scrape time from its counts (docs/operations.md#prometheus-metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from watchdog.daemon.ingest.service import Ingest, records

PREFIX = "memory_watchdog_ingest"


class IngestCollector(Collector):
    """A prometheus_client collector reading the receiver's and the loader's counts."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    def collect(self) -> Iterator[Metric]:
        ingest = self.ingest
        counted = CounterMetricFamily(
            f"{PREFIX}_records",
            "OTLP log records and spans: accepted (durable), rejected, loaded (in the store)",
            labels=["signal", "outcome"],
        )
        for signal, outcome, count in records(ingest):
            counted.add_metric([signal, outcome], count)
        yield counted
        counts = ingest.receiver.counts
        with counts.lock:
            retried, refused = dict(counts.retried), dict(counts.refused)
        again = CounterMetricFamily(
            f"{PREFIX}_retried_requests",
            "Requests whose records were already kept (a retry): stored once",
            labels=["signal"],
        )
        for signal, count in retried.items():
            again.add_metric([signal], count)
        yield again
        errors = CounterMetricFamily(
            f"{PREFIX}_refused_requests", "Requests answered with an error", labels=["status"]
        )
        for status, count in sorted(refused.items()):
            errors.add_metric([str(status)], count)
        yield errors
        yield GaugeMetricFamily(
            f"{PREFIX}_queued_bytes",
            "Accepted rows not yet in the store, in bytes",
            value=ingest.spool.queued_bytes,
        )
        loaded = ingest.loaded
        rounds = CounterMetricFamily(
            f"{PREFIX}_load_rounds", "Load rounds by outcome", labels=["outcome"]
        )
        rounds.add_metric(["ok"], loaded.rounds - loaded.failed_rounds)
        rounds.add_metric(["failed"], loaded.failed_rounds)
        yield rounds
        yield GaugeMetricFamily(
            f"{PREFIX}_last_load_seconds",
            "How long the last load round held the store",
            value=loaded.last_round_s,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_set_aside_rows",
            "Rows the store refused, moved to the spool's quarantine",
            value=loaded.set_aside,
        )
        state = ingest.spool_state()
        yield GaugeMetricFamily(
            f"{PREFIX}_spool_writable",
            "1 while the spool can keep what is sent, 0 while it cannot (503 to every request)",
            value=1 if state.ok else 0,
        )
        if state.free_bytes is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_spool_free_bytes",
                "Room left on the spool's filesystem, bytes",
                value=state.free_bytes,
            )
