"""Two watchdogs on one server store: the alert lease lets one deliver, the other stand by.

Real processes against the chdb-backed HTTP server of this process
(tests/faults/processes.py): two `check --notify` at once, over and over, as
a daemon and a cron line side by side do by mistake; and an HA pair of
daemons whose holder dies.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.processes import (
    AT,
    NO_SLOS,
    Rig,
    clean_env,
    demo_source,
    freeze_store_when_slack_receives,
    open_rig,
)
from watchdog.core.store import Store
from watchdog.core.times import rfc3339

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return demo_source(store, "tw")


@pytest.fixture
def rig(ch_server: ClickHouseHTTPServer, source: str, tmp_path: Path) -> Iterator[Rig]:
    """A reminder every evaluation (repeat_interval 1h), so each round has a message to send;
    a 10s lease, outliving the start of a second daemon; no SLO (one message a round)."""
    with open_rig(
        ch_server,
        source,
        tmp_path,
        alerts='repeat_interval = "1h"',
        lease_ttl="10s",
        extra=NO_SLOS,
    ) as opened:
        yield opened


def test_two_check_notify_at_once_post_every_message_once(rig: Rig) -> None:
    """Four rounds of two `check --notify --at T` started together: every message is posted
    exactly once, and the process that did not send says it stood by or had nothing new."""
    rounds = 4
    said = []
    for hour in range(rounds):
        at = rfc3339(AT + timedelta(hours=hour))
        pair = [rig.popen(["check", "--notify", "--at", at]) for _ in range(2)]
        errs = [proc.communicate(timeout=120)[1] for proc in pair]
        assert [proc.returncode for proc in pair] == [1, 1], errs  # breached, as each reports
        said += errs
    counts = collections.Counter(rig.texts())
    assert sum(counts.values()) == rounds, counts  # one message a round: a fire, then reminders
    assert max(counts.values()) == 1, counts
    standby = [e for e in said if "alerts: standby:" in e or "already processed" in e]
    assert len(standby) == rounds  # in each round one process sent, the other did not
    assert sum(b["delivered"] for b in rig.outbox()) == rounds


def test_a_standby_daemon_takes_over_when_the_holder_dies(rig: Rig, tmp_path: Path) -> None:
    """An HA pair: while one daemon holds the alert lease the other stands by; when the holder
    dies mid-delivery, the other takes over once the lease expires, judges every window left
    and sends the message that was cut short once more at most."""
    frozen = freeze_store_when_slack_receives(rig)  # the holder hangs right after Slack's OK
    holder = rig.start(env=clean_env(tmp_path / "host-a"))
    holder.wait_for(lambda: frozen() == 1)
    other = rig.start(env=clean_env(tmp_path / "host-b"), direct=True)  # not frozen
    other.wait_for(lambda: other.said("standby:"))
    assert other.said(f"daemon[{holder.proc.pid}]")  # it names the holder
    holder.kill()  # the lease the other waits for is held by a dead process until it expires
    rig.front.set_mode("pass")
    other.wait_for(lambda: len(other.judged()) >= 2, seconds=60)
    other.kill()
    assert other.said("this daemon holds the alert lease of")  # it says it took over
    lease = rig.status()["alert_lease"]  # what `status` shows an operator
    assert f"daemon[{other.proc.pid}]" in lease["holder"]
    texts = collections.Counter(rig.texts())
    assert max(texts.values()) <= 2, texts  # the message cut short: sent once more at most
    runs = rig.status()["runs"]
    windows = sorted((r["window"]["start"], r["window"]["end"]) for r in runs)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start == end, windows  # no window skipped
    assert all(r["status"] != "error" for r in runs)
