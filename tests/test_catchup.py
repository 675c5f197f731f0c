"""The daemon's catch-up after downtime evaluates its windows in one pass, each as alone."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.builder import T0, H, M, S, Scenario
from tests.daemon_rig import DELAY, end, new_rig
from watchdog.core.schedule import CatchUp
from watchdog.core.store import Store
from watchdog.daemon.narrate import skipped_line
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
    """Down from 5:02 to 8:02: [5,6), [6,7), [7,8) evaluated together, each run as run_once's."""
    # Three windows are the first, a middle and the last of the pass, and each differs from
    # its neighbours (a cold start every other hour, latencies by the hour): a report recorded
    # under another window's end, or the same one under all, is told apart.
    caplog.set_level(logging.INFO, logger="watchdog")
    rig = new_rig(store, busy_source(store), slack, tmp_path)
    rig.tick(rig.daemon(), end(5) + DELAY)
    rig.tick(rig.daemon(), end(8) + DELAY)  # a restart after downtime
    said = [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]
    assert "one pass evaluated the 3 windows of this catch-up" in said
    runs = {r.window_end: r for r in rig.status().runs}
    assert sorted(runs) == [end(h) for h in range(5, 9)]
    for hour in range(6, 9):
        alone = run_once(store, rig.settings, window_at(rig.settings, end(hour), H)).to_json()
        recorded = runs[end(hour)].checks
        for check_id, result in alone["checks"].items():
            for key in ("status", "value", "sample_size", "evidence"):
                assert recorded[check_id][key] == result[key], (hour, check_id, key)


@pytest.mark.parametrize(
    ("ends", "skipped", "max_catchup", "line"),
    [
        (
            3,
            4,
            2,
            "6 windows were missed, more than schedule.max_catchup = 2: the 4 oldest (ending"
            " 2026-11-28T06:00:00Z to 2026-11-28T09:00:00Z) are not judged; judging the 2 newest"
            " and the one due now",
        ),
        (
            2,
            1,
            1,
            "2 windows were missed, more than schedule.max_catchup = 1: the oldest (ending"
            " 2026-11-28T06:00:00Z) is not judged; judging the newest missed window and the one"
            " due now",
        ),
        (
            1,
            1,
            0,
            "1 window was missed, more than schedule.max_catchup = 0: the oldest (ending"
            " 2026-11-28T06:00:00Z) is not judged; judging only the window due now",
        ),
    ],
)
def test_the_catch_up_line_counts_the_missed_the_skipped_and_the_judged(
    ends: int, skipped: int, max_catchup: int, line: str
) -> None:
    """The line a catch-up that skips says: every missed window counted once, the skipped ones
    (the oldest) and when they ended, and the judged ones: at most max_catchup, then the due one."""
    judged = tuple(end(13 + i) for i in range(ends))
    plan = CatchUp(
        ends=judged, skipped=skipped, skipped_from=end(6), skipped_to=end(6 + skipped - 1)
    )
    assert skipped_line(plan, max_catchup) == line
