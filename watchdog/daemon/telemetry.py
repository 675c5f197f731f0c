"""The watchdog's own OpenTelemetry: a `watchdog.run` span per run, a `watchdog.check` child per check, metrics.

Exported over OTLP/HTTP only when the standard `OTEL_EXPORTER_OTLP_*`
variables say where, with `service.name = memory-watchdog`; no attribute
holds a secret or a payload value; the providers are handed in, so tests
read them in memory. The names and attributes:
docs/operations.md#the-watchdogs-own-telemetry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, StatusCode
from opentelemetry.util.re import parse_env_headers

from checks.base import Report, Status, Window
from checks.sources import OWN_SERVICE_NAME
from watchdog.core.times import rfc3339
from watchdog.daemon.outcome import RunOutcome

log = logging.getLogger(__name__)

SERVICE_NAME = OWN_SERVICE_NAME  # excluded from the otel presets by checks.sources
INSTRUMENTATION = "memory_watchdog"


def _otlp_target(env: Mapping[str, str], signal: str) -> tuple[str, dict[str, str]] | None:
    """The OTLP/HTTP URL and headers of one signal (TRACES or METRICS), or None when unset."""
    prefix = "OTEL_EXPORTER_OTLP_"
    endpoint = env.get(f"{prefix}{signal}_ENDPOINT", "").strip()
    if not endpoint:
        shared = env.get(f"{prefix}ENDPOINT", "").strip()
        if not shared:
            return None
        endpoint = f"{shared.rstrip('/')}/v1/{signal.lower()}"
    headers = env.get(f"{prefix}{signal}_HEADERS") or env.get(f"{prefix}HEADERS") or ""
    return endpoint, dict(parse_env_headers(headers, liberal=True))


@dataclass(frozen=True)
class CheckTiming:
    """When one check's query ran, in epoch nanoseconds, and how many checks it judged."""

    start_ns: int
    end_ns: int
    shared: int = 1  # the session checks share one query

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class Stopwatch:
    """Collects when each check's query ran: hand it to `run_once(timed=...)`."""

    timings: dict[str, CheckTiming] = field(default_factory=dict)

    def __call__(self, check_ids: Sequence[str], start_ns: int, end_ns: int) -> None:
        for check_id in check_ids:
            self.timings[check_id] = CheckTiming(start_ns, end_ns, len(check_ids))


class Telemetry:
    """The watchdog's tracer and instruments, over providers handed in."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        source: str = "",
    ) -> None:
        self._tracer_provider = tracer_provider or trace.NoOpTracerProvider()
        self._meter_provider = meter_provider or metrics.NoOpMeterProvider()
        self.source = source
        self.tracer = self._tracer_provider.get_tracer(INSTRUMENTATION)
        meter = self._meter_provider.get_meter(INSTRUMENTATION)
        self.check_value = meter.create_gauge(
            "memory_watchdog.check.value", description="The value of each check at its last run"
        )
        self.runs = meter.create_counter(
            "memory_watchdog.runs", unit="{run}", description="Runs by status"
        )
        self.notifications = meter.create_counter(
            "memory_watchdog.notifications",
            unit="{notification}",
            description="Notifications delivered or failed, by outcome",
        )
        self.backlog = meter.create_gauge(
            "memory_watchdog.outbox.backlog",
            unit="{notification}",
            description="Notifications waiting in the outbox, per notifier",
        )
        self.run_duration = meter.create_histogram(
            "memory_watchdog.run.duration", unit="s", description="How long a run took"
        )
        self.skipped = meter.create_counter(
            "memory_watchdog.windows.skipped",
            unit="{window}",
            description="Missed windows beyond schedule.max_catchup, not judged",
        )

    @classmethod
    def from_environment(cls, env: Mapping[str, str], *, source: str = "") -> Telemetry:
        """OTLP/HTTP exporters when OTEL_EXPORTER_OTLP_* endpoints are set; otherwise no-ops.

        Endpoint and headers are taken from `env` (the signal's own variable
        first, then the shared one with `/v1/<signal>` appended); TLS,
        compression and timeout knobs are read by the exporter itself.
        """
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return cls(source=source)
        traces = _otlp_target(env, "TRACES")
        metrics_target = _otlp_target(env, "METRICS")
        if traces is None and metrics_target is None:
            return cls(source=source)
        # Deferred: the SDK and its OTLP exporters load only when an endpoint is configured.
        from opentelemetry.sdk.resources import Resource

        resource = Resource.create({"service.name": SERVICE_NAME})
        tracer_provider: trace.TracerProvider | None = None
        meter_provider: metrics.MeterProvider | None = None
        if traces is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            sdk_tracer = TracerProvider(resource=resource)
            sdk_tracer.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=traces[0], headers=traces[1]))
            )
            tracer_provider = sdk_tracer
        if metrics_target is not None:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            exporter = OTLPMetricExporter(endpoint=metrics_target[0], headers=metrics_target[1])
            meter_provider = MeterProvider(
                resource=resource, metric_readers=[PeriodicExportingMetricReader(exporter)]
            )
        return cls(tracer_provider, meter_provider, source=source)

    @property
    def exporting(self) -> bool:
        """Whether anything is recorded (False for the no-op providers)."""
        return not isinstance(self._tracer_provider, trace.NoOpTracerProvider) or not isinstance(
            self._meter_provider, metrics.NoOpMeterProvider
        )

    def record_run(
        self,
        window: Window,
        *,
        status: RunOutcome,
        start_ns: int,
        end_ns: int,
        catchup: bool = False,
        report: Report | None = None,
        timings: Mapping[str, CheckTiming] | None = None,
    ) -> None:
        """A finished run: its `watchdog.run` span with the checks as children, and its metrics.

        The times are explicit (epoch ns) because the run may have happened
        in the tick's child process.
        """
        attributes: dict[str, Any] = {
            "watchdog.window.start": rfc3339(window.start),
            "watchdog.window.end": rfc3339(window.end),
            "watchdog.run.catchup": catchup,
            "watchdog.run.status": status,
        }
        if self.source:
            attributes["watchdog.source"] = self.source
        span = self.tracer.start_span("watchdog.run", attributes=attributes, start_time=start_ns)
        if status in (RunOutcome.ERROR, RunOutcome.STORE_ERROR):
            span.set_status(StatusCode.ERROR, status)
        if report is not None:
            self._record_checks(span, report, timings or {})
        span.end(end_time=end_ns)
        duration_s = (end_ns - start_ns) / 1e9
        self.runs.add(1, {"status": status})
        self.run_duration.record(duration_s, {"status": status})

    def _record_checks(self, run: Span, report: Report, timings: Mapping[str, CheckTiming]) -> None:
        """One `watchdog.check` child span per check that ran, and each value as a gauge."""
        context = trace.set_span_in_context(run)
        for check_id, result in report.checks.items():
            if result.status is Status.DISABLED:
                continue
            attributes: dict[str, Any] = {
                "watchdog.check.id": check_id,
                "watchdog.check.status": result.status.value,
            }
            if result.value is not None:
                attributes["watchdog.check.value"] = float(result.value)
            timing = timings.get(check_id)
            if timing is not None:
                attributes["watchdog.check.duration_s"] = timing.duration_s
                attributes["watchdog.check.query_shared_by"] = timing.shared
            span = self.tracer.start_span(
                "watchdog.check",
                context=context,
                attributes=attributes,
                start_time=timing.start_ns if timing else None,
            )
            if result.status is Status.ERROR:
                span.set_status(StatusCode.ERROR, "the check could not run")
            span.end(end_time=timing.end_ns if timing else None)
            if result.value is not None:
                self.check_value.set(
                    float(result.value), {"check": check_id, "source": report.source}
                )

    def record_notifications(self, delivered: int, failed: int) -> None:
        """Count deliveries of one run (failed: attempts that did not deliver)."""
        if delivered:
            self.notifications.add(delivered, {"outcome": "delivered"})
        if failed:
            self.notifications.add(failed, {"outcome": "failed"})

    def record_backlog(self, pending: Mapping[str, int]) -> None:
        """The outbox backlog per notifier, as of the end of a run."""
        for notifier, count in pending.items():
            self.backlog.set(count, {"notifier": notifier})

    def record_skipped(self, windows: int) -> None:
        """Count missed windows a catch-up did not judge."""
        self.skipped.add(windows)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush what is buffered and stop the exporters (bounded by `timeout_s`)."""
        millis = int(timeout_s * 1000)
        for provider in (self._tracer_provider, self._meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                try:
                    flush(millis)
                except Exception as exc:  # an exporter failure never stops the watchdog
                    log.warning("telemetry flush failed: %s", exc)
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                try:
                    stop()
                except Exception as exc:
                    log.warning("telemetry shutdown failed: %s", exc)
