"""`/metrics` on `daemon --http`: what the daemon knows after each tick, in Prometheus' format.

The daemon runs in this process on the shared embedded store, ticked at
instants the test chooses; its HTTP server is scraped over a loopback
socket and the body parsed with prometheus_client's own parser, as a
Prometheus server would read it. Each daemon has its own registry.
"""

from __future__ import annotations

import contextlib
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from alerts.records import last_runs
from alerts.testing import RecordingNotifier
from tests.builder import T0, H, M
from tests.daemon_rig import write_source
from watchdog.core.errors import StoreLockedError
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.serving import Serving
from watchdog.daemon.spool import Spool
from watchdog.daemon.systemd import Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.runner.plugins import PLUGINS

DELAY = 2 * M


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Opener:
    """Yields the shared store, or fails as a locked embedded store while `locked`."""

    store: Store
    locked: bool = False

    @contextlib.contextmanager
    def __call__(self, settings: Settings) -> Iterator[Store]:
        if self.locked:
            raise StoreLockedError("chdb:///store", "the embedded store is held by process 4242")
        yield self.store


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    """One session with a recall in the first hour of T0's day, then silence: freshness breaches."""
    return write_source(store)


@dataclass
class Rig:
    daemon: Daemon
    clock: Clock
    opener: Opener
    chat: RecordingNotifier
    get: Callable[[str], tuple[str, str]]

    def tick(self, at: datetime) -> None:
        self.clock.now = at
        self.daemon.tick()

    def scrape(
        self, accept: str | None = None
    ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, by (name, sorted labels)."""
        body, _ = self.get(accept or "")
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }


@pytest.fixture
def rig(store: Store, source: str, tmp_path: Path) -> Iterator[Rig]:
    settings = settings_from_mapping(
        {
            "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
            "source": {"table": source},
            "schedule": {"every": "1h", "delay": "2m", "max_catchup": 30},
            "checks": {"telemetry_freshness": {"target": 600}},
        },
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
    )
    clock = Clock(T0 + 2 * H + DELAY)
    opener = Opener(store)
    chat = RecordingNotifier(name="slack")
    daemon = Daemon(
        settings,
        schedule=Schedule.from_settings(settings.schedule),
        spool=Spool.for_settings(settings),
        outputs=Outputs(
            Telemetry(source=settings.source.display_name),
            Metrics(CollectorRegistry(), source=source, version="9.9.9", receivers=["slack"]),
            Notify(),
        ),
        notifiers={"slack": chat},
        running=Running(clock=clock, open_store_fn=opener, pages=False),
        serving=Serving(http="127.0.0.1:0"),
    )
    server = daemon.serve_http()
    assert server is not None
    host, port = server.server_address[:2]

    def get(accept: str) -> tuple[str, str]:
        request = urllib.request.Request(f"http://{host!s}:{port}/metrics")
        if accept:
            request.add_header("Accept", accept)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read().decode(), response.headers["Content-Type"]

    yield Rig(daemon, clock, opener, chat, get)
    server.shutdown()
    server.server_close()


def sample(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_before_any_run_metrics_hold_only_the_build_and_zeroed_counters(rig: Rig) -> None:
    """A fresh daemon serves its version, runs_total at 0 per outcome, no check values yet."""
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_build_info", version="9.9.9")] == 1
    for outcome in ("ok", "breached", "error", "store_error"):
        assert samples[sample("memory_watchdog_runs_total", outcome=outcome)] == 0
    assert samples[sample("memory_watchdog_outbox_pending", receiver="slack")] == 0
    assert not any(name == "memory_watchdog_check_value" for name, _ in samples)


def test_after_a_run_each_check_has_its_value_and_status(rig: Rig, source: str) -> None:
    """The judged window's checks: value, a 1 on the status it had and 0 on the others."""
    rig.tick(T0 + 2 * H + DELAY)  # judges [01:00, 02:00): the newest event is from 00:41
    samples = rig.scrape()
    [run] = last_runs(rig.opener.store, rig.daemon.settings, 1)  # what the run log recorded
    for check_id, result in run.checks.items():
        value = sample("memory_watchdog_check_value", check=check_id, source=source)
        if result["value"] is None:
            assert value not in samples, check_id
        else:
            assert samples[value] == result["value"], check_id
    assert (
        samples[sample("memory_watchdog_check_value", check="telemetry_freshness", source=source)]
        > 3600
    )
    status = {
        labels["status"]: value
        for (name, pairs), value in samples.items()
        if name == "memory_watchdog_check_status"
        and (labels := dict(pairs))["check"] == "telemetry_freshness"
    }
    assert status["breached"] == 1 and sum(status.values()) == 1
    assert (
        samples[sample("memory_watchdog_check_status", check="store", source=source, status="ok")]
        == 1
    )


def test_runs_are_counted_by_outcome_with_their_time_and_duration(rig: Rig) -> None:
    """Two windows judged: runs_total, the last run's time and duration, the window judged last."""
    rig.tick(T0 + 2 * H + DELAY)  # [01:00, 02:00)
    rig.tick(T0 + 3 * H + DELAY)  # [02:00, 03:00)
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_runs_total", outcome="breached")] == 2
    assert samples[sample("memory_watchdog_run_duration_seconds_count")] == 2
    assert samples[sample("memory_watchdog_last_run_timestamp_seconds")] > 0
    assert samples[sample("memory_watchdog_last_run_duration_seconds")] > 0
    judged = sample("memory_watchdog_last_judged_window_end_timestamp_seconds")
    assert samples[judged] == (T0 + 3 * H).timestamp()


def test_firing_alerts_and_the_outbox_backlog_per_receiver(rig: Rig, source: str) -> None:
    """Alerts firing after the run, and what waits in the outbox for a receiver that fails."""
    rig.chat.fail_with("Slack answered HTTP 503")
    rig.tick(T0 + 2 * H + DELAY)
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_alerts_firing", source=source)] >= 1
    assert samples[sample("memory_watchdog_outbox_pending", receiver="slack")] == 1
    assert samples[sample("memory_watchdog_notifications_total", outcome="failed")] == 1
    rig.chat.recover()
    rig.tick(T0 + 3 * H + DELAY)
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_outbox_pending", receiver="slack")] == 0
    assert samples[sample("memory_watchdog_notifications_total", outcome="delivered")] >= 1


def test_a_store_that_cannot_be_opened_counts_a_store_error_run(rig: Rig, source: str) -> None:
    """A locked store: runs_total{store_error}, the store check in error, one spooled run."""
    rig.opener.locked = True
    rig.tick(T0 + 2 * H + DELAY)
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_runs_total", outcome="store_error")] == 1
    assert (
        samples[
            sample("memory_watchdog_check_status", check="store", source=source, status="error")
        ]
        == 1
    )
    assert samples[sample("memory_watchdog_spooled_error_runs")] == 1
    rig.opener.locked = False
    rig.tick(T0 + 3 * H + DELAY)
    samples = rig.scrape()
    assert samples[sample("memory_watchdog_spooled_error_runs")] == 0
    assert (
        samples[sample("memory_watchdog_check_status", check="store", source=source, status="ok")]
        == 1
    )


def test_metrics_answer_in_openmetrics_when_the_scraper_asks(rig: Rig) -> None:
    """Accept: application/openmetrics-text gets OpenMetrics, ending in # EOF."""
    body, content_type = rig.get("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")
    _, plain = rig.get("")
    assert plain.startswith("text/plain; version=0.0.4")


def test_each_daemon_keeps_its_own_registry(rig: Rig) -> None:
    """Metrics of one daemon never leak into another's (no global registry)."""
    other = Metrics(CollectorRegistry(), source="x")
    rig.tick(T0 + 2 * H + DELAY)
    body, _ = other.exposition(None)
    assert b'memory_watchdog_runs_total{outcome="breached"} 0.0' in body
