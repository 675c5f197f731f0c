"""The watchdog's own telemetry, read back from the SDK's in-memory exporters.

The daemon runs in this process on the shared embedded store, its
collaborators handed in: a clock the test moves, a recording notifier, an
in-memory span exporter and metric reader, and a store opener.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from alerts.testing import FakeTimer, RecordingNotifier
from tests.builder import T0, H, M, S, Scenario, unique_table
from tests.daemon_rig import NO_SLOS
from tests.fakes import LOCKED, MovableClock, StoreOpener
from tests.otlp_standin import OTLPCollector
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.spool import Spool
from watchdog.daemon.telemetry import Telemetry
from watchdog.runner.plugins import PLUGINS

SECRET = "s3cr3t-webhook-part"


@dataclass
class Rig:
    """A daemon wired to in-memory telemetry, and what it is wired to."""

    daemon: Daemon
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    clock: MovableClock
    opener: StoreOpener
    notifier: RecordingNotifier
    spool: Spool
    settings: Settings

    def finished(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def with_telemetry(self, telemetry: Telemetry) -> Daemon:
        """A daemon on this rig's store, clock, notifier and spool, saying what it does to `telemetry`."""
        return Daemon(
            self.settings,
            schedule=Schedule.from_settings(self.settings.schedule),
            spool=self.spool,
            outputs=Outputs.quiet(telemetry),
            notifiers={"recording": self.notifier},
            running=Running(
                clock=self.clock, timer=FakeTimer(), open_store_fn=self.opener, pages=False
            ),
        )

    def points(self, metric: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """The data points of one metric by their attributes (value, or the histogram point)."""
        found: dict[frozenset[tuple[str, Any]], Any] = {}
        data = self.metrics.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name != metric:
                        continue
                    for point in m.data.data_points:
                        key = frozenset((point.attributes or {}).items())
                        found[key] = getattr(point, "value", point)
        return found


def write_breached_scenario(store: Store) -> str:
    """One session started without recall in [00:00, 04:00), one healthy one."""
    sc = Scenario()
    sc.session("cold").starts(T0 + H).ends(T0 + H + 10 * M).observes(T0 + H + 11 * M)
    sc.session("fine").starts(T0 + 2 * H).recalls(T0 + 2 * H + S).ends(T0 + 3 * H)
    sc.session("fine").observes(T0 + 3 * H + M)
    table = unique_table()
    sc.write(store, table)
    return table


def make_rig(store: Store, tmp_path: Path, **config: Any) -> Rig:
    table = write_breached_scenario(store)
    settings = settings_from_mapping(
        {
            "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
            "source": {"table": table},
            "schedule": {"every": "4h", "delay": "0s", **config},
            "alerts": {"slack": {"webhook_url": f"https://hooks.slack.test/services/{SECRET}"}},
            "slo": NO_SLOS,  # the SLOs' telemetry: tests/test_slo_metrics.py
        },
        plugins=PLUGINS,
        env={},
    )
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(tracer_provider, MeterProvider(metric_readers=[metrics]), source=table)
    clock = MovableClock(T0 + 4 * H + M)
    notifier = RecordingNotifier()
    opener = StoreOpener(store)
    spool = Spool(tmp_path / "spool.json")
    rig = Rig(None, spans, metrics, clock, opener, notifier, spool, settings)  # type: ignore[arg-type]
    rig.daemon = rig.with_telemetry(telemetry)
    return rig


@pytest.fixture
def rig(store: Store, tmp_path: Path) -> Rig:
    return make_rig(store, tmp_path)


def test_a_run_is_one_span_with_a_child_span_per_check(rig: Rig) -> None:
    """`watchdog.run` carries the window and status; each check is a child with its query time."""
    rig.daemon.tick()
    (run,) = rig.finished("watchdog.run")
    assert run.attributes is not None
    assert run.attributes["watchdog.window.start"] == "2026-11-28T00:00:00Z"
    assert run.attributes["watchdog.window.end"] == "2026-11-28T04:00:00Z"
    assert run.attributes["watchdog.run.status"] == "breached"
    assert run.attributes["watchdog.run.catchup"] is False
    checks = rig.finished("watchdog.check")
    assert len(checks) == 12
    assert run.context is not None
    for span in checks:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.start_time is not None and run.start_time is not None
        assert run.start_time <= span.start_time <= (span.end_time or 0) <= (run.end_time or 0)
    by_id = {s.attributes["watchdog.check.id"]: s for s in checks if s.attributes}
    cold = by_id["recall_coverage"].attributes
    assert cold is not None
    assert cold["watchdog.check.status"] == "breached"
    assert cold["watchdog.check.value"] == 1.0
    assert float(str(cold["watchdog.check.duration_s"])) > 0
    assert int(str(cold["watchdog.check.query_shared_by"])) > 1  # the shared session query


def test_a_run_records_check_values_runs_notifications_backlog_and_duration(rig: Rig) -> None:
    """Gauge per check value, runs by status, deliveries, outbox backlog, run duration."""
    rig.daemon.tick()
    source = rig.daemon.source
    values = rig.points("memory_watchdog.check.value")
    assert values[frozenset({("check", "recall_coverage"), ("source", source)})] == 1.0
    assert rig.points("memory_watchdog.runs") == {frozenset({("status", "breached")}): 1}
    assert rig.points("memory_watchdog.notifications") == {frozenset({("outcome", "delivered")}): 1}
    assert rig.points("memory_watchdog.outbox.backlog") == {
        frozenset({("notifier", "recording")}): 0
    }
    (duration,) = rig.points("memory_watchdog.run.duration").values()
    assert duration.count == 1 and duration.sum > 0
    assert len(rig.notifier.sent) == 1


def test_catch_up_runs_are_marked_and_skipped_windows_counted(store: Store, tmp_path: Path) -> None:
    """Down from 04:00 to 16:00 with max_catchup 1: 12:00 caught up, 16:00 judged, 08:00 counted."""
    rig = make_rig(store, tmp_path, max_catchup=1)
    rig.daemon.tick()
    rig.spans.clear()
    rig.clock.now = T0 + 16 * H + M
    rig.daemon.tick()
    runs = rig.finished("watchdog.run")
    judged = [
        (r.attributes["watchdog.window.end"], r.attributes["watchdog.run.catchup"])
        for r in runs
        if r.attributes
    ]
    assert judged == [("2026-11-28T12:00:00Z", True), ("2026-11-28T16:00:00Z", False)]
    assert rig.points("memory_watchdog.windows.skipped") == {frozenset(): 1}


def test_store_down_run_counts_as_store_error_and_alerts_once_directly(
    rig: Rig,
) -> None:
    """The store cannot be opened: store_error run, spooled, the alert sent directly, once."""
    rig.daemon.tick()  # 04:00 judged, the breach announced
    rig.opener.fail_with(LOCKED)
    rig.clock.now = T0 + 8 * H + M
    rig.daemon.tick()
    rig.clock.now = T0 + 12 * H + M
    rig.daemon.tick()
    runs = [r for r in rig.finished("watchdog.run") if r.attributes]
    failed = [
        r for r in runs if r.attributes and r.attributes["watchdog.run.status"] == "store_error"
    ]
    assert len(failed) == 2
    assert all(r.status.status_code is StatusCode.ERROR for r in failed)
    assert rig.points("memory_watchdog.runs")[frozenset({("status", "store_error")})] == 2
    store_messages = [m for m in rig.notifier.sent if "could not read the source" in m.text]
    assert len(store_messages) == 1
    assert [r.at for r in rig.spool.runs] == [T0 + 8 * H, T0 + 12 * H]

    rig.opener.recover()
    rig.clock.now = T0 + 12 * H + 2 * M
    rig.daemon.tick()  # flush the spool, judge 08:00 and 12:00
    assert not rig.spool.runs and not (rig.spool.path.exists())
    texts = [m.text for m in rig.notifier.sent]
    assert len([t for t in texts if "could not read the source" in t]) == 1
    rig.clock.now = T0 + 16 * H + M
    rig.daemon.tick()  # the first window after the failed ones resolves the store alert
    assert any("store" in m.text and "resolved" in m.text.lower() for m in rig.notifier.sent)


def test_no_attribute_holds_a_secret(rig: Rig) -> None:
    """No span or metric attribute carries the webhook (or any URL)."""
    rig.daemon.tick()
    values: list[str] = []
    for span in rig.spans.get_finished_spans():
        values += [str(v) for v in (span.attributes or {}).values()]
    for metric in (
        "memory_watchdog.check.value",
        "memory_watchdog.runs",
        "memory_watchdog.outbox.backlog",
    ):
        for key in rig.points(metric):
            values += [str(v) for _, v in key]
    assert values
    assert not [v for v in values if SECRET in v or "://" in v]


def test_without_otlp_environment_nothing_is_exported() -> None:
    """No OTEL_EXPORTER_OTLP_* endpoint: no-op providers, no exporter, no console output."""
    assert not Telemetry.from_environment({}).exporting
    assert not Telemetry.from_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    ).exporting


def test_otlp_endpoint_exports_spans_and_metrics_over_http(rig: Rig) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, a run's spans and metrics reach the collector."""
    collector = OTLPCollector()
    try:
        telemetry = Telemetry.from_environment(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}, source="t"
        )
        assert telemetry.exporting
        rig.with_telemetry(telemetry).tick()
        telemetry.shutdown(timeout_s=10)
    finally:
        collector.close()
    assert "/v1/traces" in collector.paths and "/v1/metrics" in collector.paths
