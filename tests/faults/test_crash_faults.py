"""Crashes in a row: tick processes killed one after another, `check --notify` killed at random.

Real processes, real SIGKILLs, against the chdb-backed HTTP server of this
process (tests/faults/processes.py). What must hold however many crashes
happen: a window that was judged keeps its verdict, every window is judged,
a crashed run is said as one (never as a store outage) by an alert that
resolves, and each message is posted at most twice (one duplicate), none lost.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.slack_standin import Reply
from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.processes import (
    AT,
    Daemon,
    Rig,
    demo_source,
    freeze_store_when_slack_receives,
    open_rig,
)
from watchdog.core.store import Store
from watchdog.core.times import rfc3339

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return demo_source(store, "cf")


@pytest.fixture
def rig(ch_server: ClickHouseHTTPServer, source: str, tmp_path: Path) -> Iterator[Rig]:
    """Every 6s: longer than a window's run takes here, so the daemon keeps up between kills."""
    with open_rig(ch_server, source, tmp_path, every="6s") as opened:
        yield opened


def kill_a_tick(daemon: Daemon, after: float) -> None:
    """Wait for the daemon's next tick process, let it run `after` seconds, SIGKILL it."""
    daemon.wait_for(lambda: bool(daemon.ticks()))
    ticks = daemon.ticks()
    time.sleep(after)
    for pid in ticks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while set(ticks) & set(daemon.ticks()):
        time.sleep(0.01)


def contiguous(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The run log's windows, oldest first, checked to follow one another without a gap."""
    windows = sorted((r["window"]["start"], r["window"]["end"]) for r in runs)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start == end, windows
    return windows


def test_tick_kills_in_a_row_keep_every_verdict_and_judge_every_window(rig: Rig) -> None:
    """Five tick processes killed in a row: no judged window turns `error`, every window is
    judged, nothing says the store failed, and the `run` alert fires, then resolves."""
    daemon = rig.start()
    daemon.wait_for(lambda: len(daemon.judged()) >= 1, seconds=60)
    pace = random.Random(11)
    for _ in range(5):  # a window run takes seconds here: kills land before, in and after one
        kill_a_tick(daemon, after=pace.uniform(0.0, 5.0))
    before = len(daemon.judged())
    daemon.wait_for(
        lambda: (
            len(daemon.judged()) >= before + 2
            and any("runs finish again" in text for text in rig.texts())
        ),
        seconds=60,
    )
    daemon.kill()
    runs = rig.status()["runs"]
    assert [r for r in runs if r["status"] == "error" or r["problem"]] == []
    contiguous(runs)
    texts = rig.texts()
    assert not any("could not read the source" in text for text in texts)
    assert any("died before it finished" in text for text in texts)


def test_tick_kills_in_a_row_mid_send_post_each_message_at_most_twice(rig: Rig) -> None:
    """Three ticks killed in a row (more than the two sends a message may take), each between
    Slack's OK and the `delivered` mark when a message goes out: every message is posted at
    most twice, and none is left behind."""
    frozen = freeze_store_when_slack_receives(rig, times=3)
    daemon = rig.start()
    for _ in range(3):
        seen, deadline = frozen(), time.monotonic() + 20
        while frozen() == seen and time.monotonic() < deadline:
            time.sleep(0.05)
        if frozen() == seen:  # nothing left to send (given up): kill the tick wherever it is
            kill_a_tick(daemon, after=1.0)
            continue
        time.sleep(0.3)  # Slack answered; the tick hangs on the frozen store
        kill_a_tick(daemon, after=0)
        rig.front.set_mode("pass")  # before the next tick (it starts at once) reaches the store
    frozen.stop()
    rig.front.set_mode("pass")
    daemon.wait_for(lambda: daemon.said("resolved run"), seconds=90)  # a tick finished
    daemon.kill()
    counts = collections.Counter(rig.texts())
    assert max(counts.values()) <= 2, counts
    outbox = rig.outbox()
    assert sum(b["pending"] for b in outbox) == 0
    assert len(counts) == sum(b["delivered"] + b["unconfirmed"] for b in outbox)


def test_random_kills_of_check_notify_with_a_slow_slack_post_each_message_at_most_twice(
    ch_server: ClickHouseHTTPServer, source: str, tmp_path: Path
) -> None:
    """`check --notify` SIGKILLed at random points of its alerting, seven times, while a slow
    Slack answers: each message is posted at most twice, and every message is delivered."""
    with open_rig(ch_server, source, tmp_path, proxy=False, alerts='repeat_interval = "1h"') as rig:
        answer = rig.slack.answer

        def slow(handler: Any, reply: Reply) -> None:
            time.sleep(0.8)  # posted when the request arrived; the answer comes late
            answer(handler, reply)

        rig.slack.answer = slow  # type: ignore[method-assign]
        pace = random.Random(23)
        kills, hour = 0, 0
        while kills < 7:
            check = rig.popen(["check", "--notify", "--at", rfc3339(AT + timedelta(hours=hour))])
            hour += 1
            assert check.stdout is not None
            check.stdout.readline()  # the report is out: alerting begins
            try:
                check.wait(timeout=pace.uniform(0.0, 3.0))
            except subprocess.TimeoutExpired:
                os.killpg(check.pid, signal.SIGKILL)
                kills += 1
            check.communicate()
        for _ in range(10):  # then runs that finish, until nothing is left to send
            time.sleep(1)  # a killed holder's lease expires (alerts.lease_ttl, 4s)
            finished = rig.run(["check", "--notify", "--at", rfc3339(AT + timedelta(hours=hour))])
            if "standby" not in finished.stderr and not any(b["pending"] for b in rig.outbox()):
                break
        outbox = rig.outbox()
        counts = collections.Counter(rig.texts())
    assert sum(b["pending"] for b in outbox) == 0 and counts
    assert max(counts.values()) <= 2, counts
    assert len(counts) == sum(b["delivered"] + b["unconfirmed"] for b in outbox)
