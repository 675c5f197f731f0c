"""The daemon's catch-up after downtime evaluates its windows in one pass, each as alone."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.builder import T0, H, M, S, Scenario
from tests.daemon_rig import DELAY, end, new_rig
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at


def busy_source(store: Store) -> str:
    """A session every hour, every other one a cold start: the windows tell apart."""
    scenario = Scenario()
    for hour in range(10):
        start = T0 + hour * H + 5 * M
        session = scenario.session(f"s{hour}").starts(start)
        if hour % 2:
            session.recalls(start + S, latency_ms=400 + hour)
        session.ends(start + 30 * M).observes(start + 31 * M)
    table = f"d_{uuid.uuid4().hex[:10]}.otel_events"
    scenario.write(store, table)
    return table


@pytest.fixture
def slack() -> SlackStandIn:
    standin = SlackStandIn()
    yield standin  # type: ignore[misc]
    standin.close()


def test_a_catch_up_judges_its_windows_in_one_pass_as_each_alone(
    store: Store, slack: SlackStandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Down from 5:02 to 9:02: [5,6) .. [8,9) evaluated together, each run as run_once's."""
    caplog.set_level(logging.INFO, logger="watchdog")
    rig = new_rig(store, busy_source(store), slack, tmp_path)
    rig.tick(rig.daemon(), end(5) + DELAY)
    rig.tick(rig.daemon(), end(9) + DELAY)  # a restart after downtime
    said = [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]
    assert "one pass evaluated the 4 windows of this catch-up" in said
    runs = {r.window_end: r for r in rig.status().runs}
    assert sorted(runs) == [end(h) for h in range(5, 10)]
    for hour in range(6, 10):
        alone = run_once(store, rig.settings, window_at(rig.settings, end(hour), H)).to_json()
        recorded = runs[end(hour)].checks
        for check_id, result in alone["checks"].items():
            for key in ("status", "value", "sample_size", "evidence"):
                assert recorded[check_id][key] == result[key], (hour, check_id, key)
