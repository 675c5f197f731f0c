"""The daemon's test rig: a daemon in this process on the shared store, a clock the test moves.

Used by tests/test_daemon.py and tests/test_daemon_views.py: the collaborators
are handed in (a clock the test moves, tests/fakes.py; a store opener
yielding the shared embedded store or failing as a locked one; Slack at the
local stand-in), and each test ticks the daemon at the instants it chooses.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.slack_standin import Reply, SlackStandIn
from tests.builder import T0, H, M, Scenario
from tests.fakes import LOCKED, MovableClock, StoreOpener
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.reload import Loader
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.serving import Serving
from watchdog.daemon.spool import Spool
from watchdog.daemon.status import DaemonStatus, read_status
from watchdog.daemon.telemetry import Telemetry
from watchdog.runner.plugins import PLUGINS

DELAY = 2 * M  # the schedule's delay: the window ending at h:00 is judged at h:02
STORE_DOWN = "could not read the source"  # the `store` alert's wording in Slack
# The built-in SLOs turned off: a fresh watchdog database's first tick then skips the SLO
# ledger's 30-day catch-up (about 2.5 CPU-s), for the tests that check nothing about SLOs
# (as tests/faults/processes.py NO_SLOS does for a process's config).
NO_SLOS: dict[str, Any] = {
    name: {"enabled": False} for name in ("observe_success", "recall_success", "recall_latency")
}


def end(hour: int) -> datetime:
    """The end of the hourly window ending at `hour` o'clock on T0's day."""
    return T0 + hour * H


def window(hour: int) -> tuple[datetime, datetime]:
    """The hourly window ending at `hour` o'clock, as (start, end)."""
    return end(hour) - H, end(hour)


def wait_until(found: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """Wait until `found` holds (generously bounded), failing with `what` otherwise."""
    deadline = time.monotonic() + seconds
    while not found():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} never happened")
        time.sleep(0.02)


def write_source(store: Store) -> str:
    """Telemetry of one session in the first hour of T0's day, none after: freshness breaches."""
    scenario = Scenario()
    scenario.session("s1").starts(T0 + 10 * M).recalls(T0 + 11 * M).ends(T0 + 40 * M)
    scenario.session("s1").observes(T0 + 41 * M)
    table = f"d_{uuid.uuid4().hex[:10]}.otel_events"
    scenario.write(store, table)
    return table


@dataclass
class Rig:
    """One test's settings, clock, store opener and Slack; `daemon()` starts a daemon."""

    settings: Settings
    clock: MovableClock
    opener: StoreOpener
    store: Store
    slack: SlackStandIn

    def daemon(
        self,
        *,
        pages: bool = False,
        http: str | None = None,
        reload: Loader | None = None,
        **serving: Any,
    ) -> Daemon:
        """A daemon starting now: a new one reads the run log and the spool, as after a restart."""
        return Daemon(
            self.settings,
            schedule=Schedule.from_settings(self.settings.schedule),
            spool=Spool.for_settings(self.settings),
            outputs=Outputs.quiet(
                Telemetry.from_environment({}, source=self.settings.source.display_name)
            ),
            running=Running(clock=self.clock, open_store_fn=self.opener, pages=pages),
            serving=Serving(http=http, reload=reload, **serving),
        )

    def tick(self, daemon: Daemon, at: datetime) -> None:
        """The scheduler fires at `at`."""
        self.clock.now = at
        daemon.tick()

    def status(self) -> DaemonStatus:
        """What `memory-watchdog status` reads now."""
        return read_status(self.store, self.settings, self.clock(), 200)

    def windows(self) -> list[tuple[datetime, datetime]]:
        """Every window in the run log, oldest first."""
        return [(r.window_start, r.window_end) for r in reversed(self.status().runs)]

    def slack_texts(self) -> list[str]:
        return [r.raw for r in self.slack.delivered()]


JUDGED = re.compile(r"(judged|caught up) \[(\S+), (\S+)\)")


def judged_lines(lines: list[str]) -> list[tuple[str, str, str]]:
    """(how, start, end) of each window the log says was judged, in order."""
    return [m.groups() for line in lines if (m := JUDGED.search(line))]  # type: ignore[misc]


def outage(rig: Rig) -> Daemon:
    """[4,5) judged at 5:02; then the store is locked at 6:02 and 7:02."""
    daemon = rig.daemon()
    rig.tick(daemon, end(5) + DELAY)
    rig.opener.fail_with(LOCKED)
    rig.tick(daemon, end(6) + DELAY)
    rig.tick(daemon, end(7) + DELAY)
    return daemon


def hold_first_answer(slack: SlackStandIn) -> tuple[threading.Event, threading.Event]:
    """Slack holds its answer to the first message until released: (received, release)."""
    received, release = threading.Event(), threading.Event()
    answer = slack.answer

    def held(handler: Any, reply: Reply) -> None:
        if not received.is_set():
            received.set()
            release.wait(timeout=120)
        answer(handler, reply)

    slack.answer = held  # type: ignore[method-assign]
    return received, release


def new_rig(
    store: Store,
    source: str,
    slack: SlackStandIn,
    tmp_path: Path,
    *,
    slo: dict[str, Any] | None = None,
    **schedule: Any,
) -> Rig:
    """Hourly windows judged 2m after they end; freshness target 10m; Slack at the stand-in;
    `slo` the `[slo]` table (NO_SLOS: none), the built-in SLOs if left out."""
    settings = settings_from_mapping(
        {
            "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
            "source": {"table": source},
            "schedule": {"every": "1h", "delay": "2m", "max_catchup": 30, **schedule},
            "checks": {"telemetry_freshness": {"target": 600}},
            "alerts": {"slack": {"webhook_url": slack.webhook_url, "timeout": "5s"}},
            **({} if slo is None else {"slo": slo}),
        },
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path / "xdg")},
    )
    return Rig(settings, MovableClock(end(5) + DELAY), StoreOpener(store), store, slack)
