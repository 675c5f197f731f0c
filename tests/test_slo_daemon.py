"""The daemon's burn tick: at every bucket close + delay, apart from the schedule's windows, the
closed buckets are judged, the SLO alerts advance and `/metrics` shows the SLOs."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alerts.records import alert_states
from tests.alerts.slack_standin import SlackStandIn
from tests.alerts.test_cli import ROOT
from tests.builder import T0, M, S, Scenario
from tests.daemon_rig import DELAY, Rig, new_rig
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.burn import BucketTrigger
from watchdog.daemon.child import ChildTicks
from watchdog.daemon.service import Daemon
from watchdog.daemon.tick import TickRequest
from watchdog.runner.plugins import PLUGINS

BURST = T0 + 10 * M  # observes in [0:10, 0:14]: half of them fail
CLOSED = T0 + 15 * M  # the boundary after the burst's bucket
PAGE = "observe_success:page"


def burst() -> Scenario:
    """Forty sessions each observing once in the 0:10 bucket, ten of them failing."""
    scenario = Scenario()
    for i in range(20):
        scenario.session(f"s{i}").starts(BURST).observes(BURST + i * 10 * S)
    for i in range(20):
        scenario.session(f"f{i}").starts(BURST).observes(BURST + M, fails=i % 2 == 0)
    return scenario


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    table = f"d_{uuid.uuid4().hex[:10]}.otel_events"
    burst().write(store, table)
    return table


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@pytest.fixture
def rig(store: Store, source: str, slack: SlackStandIn, tmp_path: Path) -> Rig:
    return new_rig(store, source, slack, tmp_path)


def started(rig: Rig, at: datetime) -> Daemon:
    """A daemon started at `at`."""
    rig.clock.now = at
    return rig.daemon()


def burn(rig: Rig, daemon: Daemon, at: datetime) -> None:
    """The burn job fires at `at`."""
    rig.clock.now = at
    daemon.burn()


def samples(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = daemon.metrics.exposition(None)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def page_messages(rig: Rig) -> list[str]:
    return [t for t in rig.slack_texts() if PAGE in t]


def test_the_trigger_fires_delay_after_each_bucket_close() -> None:
    """The burn job fires at every 5m boundary + delay, the first at or after now."""
    trigger = BucketTrigger(timedelta(minutes=5), DELAY)
    first = trigger.get_next_fire_time(None, T0 + 3 * M)
    assert first == T0 + 5 * M + DELAY
    assert trigger.get_next_fire_time(first, first) == T0 + 10 * M + DELAY
    assert trigger.get_next_fire_time(None, T0 + 5 * M + DELAY) == T0 + 5 * M + DELAY


def test_a_burst_pages_at_the_next_bucket_close_without_a_window(rig: Rig) -> None:
    """Minutes after the burst, the burn tick fires the page alert; no window is judged."""
    daemon = started(rig, CLOSED)
    burn(rig, daemon, CLOSED + DELAY)
    assert len(page_messages(rig)) == 1
    assert rig.windows() == []  # the hourly window ends at 1:00: not judged by a burn tick
    states = {r.alert.check_id: r.alert.state for r in alert_states(rig.store, rig.settings)}
    assert states[PAGE] == "firing"


def test_the_page_names_bad_events_of_its_short_window(rig: Rig) -> None:
    """The page's message names failed observes of the 5m window that fired page-fast (the
    SLO's check over it), and no other event."""
    daemon = started(rig, CLOSED)
    burn(rig, daemon, CLOSED + DELAY)
    (message,) = page_messages(rig)
    failed = {e.id for e in burst().events if e.name == "observe.store.failed"}
    named = set(re.findall(r"ev-\d{6}", message))
    assert named and named <= failed


def test_a_burn_tick_sends_nothing_twice_across_a_restart(rig: Rig) -> None:
    """A restarted daemon's burn tick at the same boundary, and the next, send nothing new."""
    burn(rig, started(rig, CLOSED), CLOSED + DELAY)
    again = started(rig, CLOSED + DELAY)
    burn(rig, again, CLOSED + DELAY + M)
    burn(rig, again, CLOSED + 5 * M + DELAY)
    assert len(page_messages(rig)) == 1


def test_a_window_tick_advances_the_slo_alerts_too(
    store: Store, source: str, slack: SlackStandIn, tmp_path: Path
) -> None:
    """The schedule's tick does the burn step as well: the page fires with the 0:15 window."""
    rig = new_rig(store, source, slack, tmp_path, every="15m")
    daemon = started(rig, CLOSED)
    rig.tick(daemon, CLOSED + DELAY)
    assert rig.windows() == [(CLOSED - 15 * M, CLOSED)]
    assert len(page_messages(rig)) == 1
    burn(rig, daemon, CLOSED + DELAY)  # the burn job at the same instant: stale
    assert len(page_messages(rig)) == 1


def test_the_burn_tick_sets_the_slo_metrics(rig: Rig) -> None:
    """After a burn tick, /metrics has the SLO's budget, its burns, and the events it judged."""
    daemon = started(rig, CLOSED)
    burn(rig, daemon, CLOSED + DELAY)
    found = samples(daemon)
    slo = ("slo", "observe_success")
    assert found[("memory_watchdog_slo_burn_rate", (slo, ("window", "5m")))] == pytest.approx(25)
    assert found[("memory_watchdog_slo_budget_remaining", (slo,))] < 0
    assert found[("memory_watchdog_slo_events_total", (("outcome", "bad"), slo))] == 10
    assert found[("memory_watchdog_slo_events_total", (("outcome", "good"), slo))] == 30


def test_events_are_counted_once_across_burn_ticks(rig: Rig) -> None:
    """A later burn tick adds only the buckets it judged: the counter does not count twice."""
    daemon = started(rig, CLOSED)
    burn(rig, daemon, CLOSED + DELAY)
    burn(rig, daemon, CLOSED + 5 * M + DELAY)
    found = samples(daemon)
    slo = ("slo", "observe_success")
    assert found[("memory_watchdog_slo_events_total", (("outcome", "bad"), slo))] == 10


SETUP = """
import sys
from tests.test_slo_daemon import BURST
from tests.builder import M, S, Scenario
from watchdog.core.store import open_store
sc = Scenario()
for i in range(20):
    sc.session(f"f{i}").starts(BURST).observes(BURST + i * S, fails=i % 2 == 0)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""


@pytest.mark.slow
def test_a_burn_tick_in_its_own_process_hands_back_the_slos(tmp_path: Path) -> None:
    """The burn tick run in a child process (as the daemon runs it) returns each SLO's figures."""
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT, timeout=300)
    settings = settings_from_mapping(
        {"store": {"url": url}, "schedule": {"every": "1h", "delay": "2m"}},
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
    )
    request = TickRequest(
        settings=settings,
        now=CLOSED + DELAY,
        last_judged=None,
        log_read=False,
        burn_only=True,
        started=CLOSED,
    )
    result = ChildTicks().run(request)
    slos = {slo.name: slo for slo in result.slos}
    assert slos["observe_success"].figures.burn["5m"] == pytest.approx(50)
    assert sum(b.bad for b in slos["observe_success"].judged) == 10
    assert result.runs == () and result.store_down is None
