"""Crashes in a row: tick processes killed one after another, `check --notify` killed at each step of its alerting.

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
import signal
import subprocess
import threading
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
    NO_SLOS,
    Daemon,
    Rig,
    demo_source,
    freeze_store_when_slack_receives,
    open_rig,
)
from watchdog.core.store import Store
from watchdog.core.times import rfc3339

pytestmark = pytest.mark.slow

LEASE_TTL = 4.0  # seconds: open_rig's alerts.lease_ttl


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return demo_source(store, "cf")


@pytest.fixture
def rig(ch_server: ClickHouseHTTPServer, source: str, tmp_path: Path) -> Iterator[Rig]:
    """Every 6s: longer than a window's run takes here, so the daemon keeps up between kills;
    no SLO (these tests judge windows and count messages; SLO buckets are not what they kill)."""
    with open_rig(ch_server, source, tmp_path, every="6s", extra=NO_SLOS) as opened:
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


def kill_a_tick_mid_query(rig: Rig, daemon: Daemon) -> None:
    """Wait for the daemon's next tick process, stall the store under it and SIGKILL it with a
    query hanging."""
    daemon.wait_for(lambda: bool(daemon.ticks()))
    hung = rig.front.accepted
    rig.front.set_mode("stall")  # drops its connections: its next query comes in stalled
    daemon.wait_for(lambda: rig.front.accepted > hung, seconds=60)
    kill_a_tick(daemon, after=0)
    rig.front.set_mode("pass")


def kill_a_tick_once_it_judged(daemon: Daemon) -> None:
    """Wait for the daemon's next tick process, SIGKILL it as soon as it has judged a window."""
    daemon.wait_for(lambda: bool(daemon.ticks()))
    judged = len(daemon.judged())
    daemon.wait_for(lambda: len(daemon.judged()) > judged, seconds=60)
    kill_a_tick(daemon, after=0)


def test_tick_kills_in_a_row_keep_every_verdict_and_judge_every_window(rig: Rig) -> None:
    """Three tick processes killed in a row, as one starts, with one's query hanging, and once
    one has judged a window of its catch-up: no judged window turns `error`, every window is
    judged, nothing says the store failed, and the `run` alert fires, then resolves."""
    daemon = rig.start()
    daemon.wait_for(lambda: bool(daemon.judged() and not daemon.ticks()), seconds=60)
    kill_a_tick(daemon, after=0)  # the next scheduled tick, before its window run
    kill_a_tick_mid_query(rig, daemon)  # the run started at once in its place
    # Two died in a row: the next scheduled tick catches up two windows or more, one by one.
    kill_a_tick_once_it_judged(daemon)
    judged = len(daemon.judged())
    daemon.wait_for(
        lambda: (
            len(daemon.judged()) >= judged + 2
            and any("runs finish again" in text for text in rig.texts())
        ),
        seconds=60,
    )
    daemon.kill()
    assert daemon.log().count("the run process died before it finished") == 3  # each kill landed
    runs = rig.status()["runs"]
    assert [r for r in runs if r["status"] == "error" or r["problem"]] == []
    contiguous(runs)
    texts = rig.texts()
    assert not any("could not read the source" in text for text in texts)
    assert any("died before it finished" in text for text in texts)


def test_tick_kills_in_a_row_mid_send_post_each_message_at_most_twice(rig: Rig) -> None:
    """Two ticks killed in a row, each between Slack's OK and the `delivered` mark when a
    message goes out (two sends cut short, as many as a message may take), then a tick that
    finishes: every message is posted at most twice, and none is left behind."""
    frozen = freeze_store_when_slack_receives(rig, times=2)
    daemon = rig.start()
    for _ in range(2):
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


def test_kills_of_check_notify_at_each_step_of_a_slow_send_post_each_message_at_most_twice(
    ch_server: ClickHouseHTTPServer, source: str, tmp_path: Path
) -> None:
    """`check --notify` SIGKILLed four times in a row while a slow Slack answers: twice with
    its request at Slack, once as its alerting begins, once more at Slack; each message is
    posted at most twice, and every message is delivered."""
    alerts = 'repeat_interval = "1h"'  # a reminder every run: each has something to send
    with open_rig(ch_server, source, tmp_path, proxy=False, alerts=alerts, extra=NO_SLOS) as rig:
        answer = rig.slack.answer
        received, killed, killing = threading.Event(), threading.Event(), threading.Event()
        killing.set()

        def slow(handler: Any, reply: Reply) -> None:
            received.set()  # posted when the request arrived; the answer comes late
            killed.wait(30 if killing.is_set() else 0.8)  # held for the kill, if one is coming
            answer(handler, reply)

        rig.slack.answer = slow  # type: ignore[method-assign]
        hour = 0

        def check_notify() -> subprocess.Popen[str]:
            nonlocal hour
            received.clear()
            killed.clear()
            check = rig.popen(["check", "--notify", "--at", rfc3339(AT + timedelta(hours=hour))])
            hour += 1
            assert check.stdout is not None
            check.stdout.readline()  # the report is out: alerting begins
            return check

        for at_slack in (True, True, False, True):
            check = check_notify()
            if at_slack:  # its request is at Slack, which has not answered
                deadline = time.monotonic() + 60
                while not received.wait(0.05) and check.poll() is None:
                    assert time.monotonic() < deadline, "it never sent"
                assert received.is_set(), check.communicate()  # it had something to send
            os.killpg(check.pid, signal.SIGKILL)
            killed.set()
            check.communicate()
            assert check.returncode == -signal.SIGKILL
            time.sleep(LEASE_TTL + 0.5)  # the killed holder's lease expires: the next one delivers
        killing.clear()
        for _ in range(10):  # then runs that finish, until nothing is left to send
            finished = rig.run(["check", "--notify", "--at", rfc3339(AT + timedelta(hours=hour))])
            if "standby" not in finished.stderr and not any(b["pending"] for b in rig.outbox()):
                break
            time.sleep(1)
        outbox = rig.outbox()
        counts = collections.Counter(rig.texts())
    assert sum(b["pending"] for b in outbox) == 0 and counts
    assert max(counts.values()) <= 2, counts
    assert len(counts) == sum(b["delivered"] + b["unconfirmed"] for b in outbox)
