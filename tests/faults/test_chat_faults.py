"""Chat faults across runs: a 10-minute Slack outage of each kind, with an injected clock.

The real alert pipeline (`alerts.pipeline.process`: lifecycle, outbox,
slack-sdk) runs every 2 simulated minutes against the Slack stand-in, with a
fault proxy in front of it for connection faults. Each run announces one
transition, so the outage leaves a backlog. Whatever the fault, the outbox
must lose nothing, duplicate nothing, keep the order, and make a bounded
number of requests per run (no retry storm); retries wait on a fake timer,
so nothing here sleeps for real except a timed-out request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from alerts.base import Deadline, Message
from alerts.notifiers import SlackNotifier
from alerts.pipeline import ProcessOutcome, process
from alerts.records import outbox_backlog
from alerts.testing import FakeTimer
from checks.base import Status
from tests.alerts.conftest import T0, make_settings, report
from tests.alerts.slack_standin import (
    INVALID_AUTH,
    OK,
    SERVER_ERROR,
    WEBHOOK_PATH,
    Reply,
    SlackStandIn,
    rate_limited,
    timeout,
)
from tests.faults.proxy import FaultProxy
from watchdog.core.store import Store

MINUTE = timedelta(minutes=1)
EVERY = 2 * MINUTE  # one run every two minutes
RUNS = 11  # minutes 0, 2, ..., 20
OUTAGE = (3 * MINUTE, 13 * MINUTE)  # ten minutes: the runs at 4, 6, 8, 10 and 12 fail
MAX_RETRIES = 3  # slack-sdk retry handlers per request


@dataclass
class CountingNotifier:
    """The real Slack notifier, counting the sends the outbox asks of it."""

    inner: SlackNotifier
    sends: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def quiet_hours(self) -> None:
        return None

    @property
    def per_alert(self) -> bool:
        return False

    def describe(self) -> str:
        return self.inner.describe()

    def send(self, message: Message, deadline: Deadline) -> None:
        self.sends += 1
        self.inner.send(message, deadline)


@dataclass
class Outage:
    """How one kind of outage is switched on and off."""

    name: str
    start: Callable[[SlackStandIn, FaultProxy], None]
    stop: Callable[[SlackStandIn, FaultProxy], None] = field(
        default=lambda slack, proxy: (setattr(slack, "default", OK), proxy.set_mode("pass"))
    )
    max_requests: int = 1 + MAX_RETRIES  # per run, whatever the backlog


def replying(reply: Reply) -> Callable[[SlackStandIn, FaultProxy], None]:
    return lambda slack, proxy: setattr(slack, "default", reply)


def proxy_mode(mode: str) -> Callable[[SlackStandIn, FaultProxy], None]:
    return lambda slack, proxy: proxy.set_mode(mode)


OUTAGES = [
    # Retry-After 90s is longer than the run's delivery deadline allows to wait: the row
    # waits for the next run; each run asks once.
    Outage("rate_limited_retry_after", replying(rate_limited(90)), max_requests=1),
    Outage("server_error_500", replying(SERVER_ERROR)),
    Outage("timeout", replying(timeout(1.0))),
    Outage("connection_refused", proxy_mode("refuse")),
    Outage("connection_reset", proxy_mode("reset")),
    # A revoked webhook (or token) is permanent for the notifier: one request per run.
    Outage("invalid_token", replying(INVALID_AUTH), max_requests=1),
]


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@pytest.fixture
def proxy(slack: SlackStandIn) -> Iterator[FaultProxy]:
    port = int(slack.base.rsplit(":", 1)[1])
    with FaultProxy(port) as fault_proxy:
        yield fault_proxy


@pytest.mark.slow
@pytest.mark.parametrize("outage", OUTAGES, ids=lambda o: o.name)
def test_a_ten_minute_chat_outage_loses_nothing_duplicates_nothing_and_never_storms(
    store: Store, slack: SlackStandIn, proxy: FaultProxy, outage: Outage
) -> None:
    """Runs during the outage keep every message; the first run after delivers all, in order, once."""
    settings = make_settings()
    notifier = CountingNotifier(
        SlackNotifier(
            webhook_url=f"http://127.0.0.1:{proxy.port}{WEBHOOK_PATH}",
            timeout_s=0.3,
            max_retries=MAX_RETRIES,
            backoff_base=0.5,
        )
    )
    enqueued: list[str] = []
    delivered: list[str] = []
    outcomes: list[tuple[datetime, bool, ProcessOutcome, int]] = []
    down = False
    for k in range(RUNS):
        elapsed = k * EVERY
        now = T0 + elapsed
        if not down and OUTAGE[0] <= elapsed < OUTAGE[1]:
            outage.start(slack, proxy)
            down = True
        elif down and elapsed >= OUTAGE[1]:
            outage.stop(slack, proxy)
            down = False
        # Alternate breach and recovery: every run announces one transition.
        status = Status.BREACHED if k % 2 == 0 else Status.OK
        timer = FakeTimer()
        sends_before = notifier.sends
        outcome = process(
            store,
            settings,
            report(now, {"recall_coverage": status}),
            now=now,
            notifiers={"slack": notifier},
            timer=timer,
        )
        requests = (notifier.sends - sends_before) + len(timer.slept)  # first tries + retries
        enqueued.extend(outcome.enqueued)
        delivered.extend(outcome.delivery.delivered)
        outcomes.append((now, down, outcome, requests))

    failing = [(o, n) for _, is_down, o, n in outcomes if is_down]
    assert len(failing) == 5
    for outcome, requests in failing:
        assert outcome.delivery.delivered == ()
        assert 1 <= requests <= outage.max_requests, requests  # bounded, whatever the backlog
        assert len(outcome.errors) == 1  # one line per run, not one per waiting message
    assert failing[-1][0].delivery.pending == 5  # the backlog of the outage, kept
    first_after = next(o for _, is_down, o, _ in outcomes[3:] if not is_down)
    assert len(first_after.delivery.delivered) == 6  # the backlog and its own message
    # Nothing lost, nothing duplicated, in order; and Slack saw each message once.
    assert len(enqueued) == RUNS
    assert delivered == enqueued
    assert len(slack.delivered()) == RUNS
    texts = [r.text for r in slack.delivered()]
    assert [("FIRING" in t, "RESOLVED" in t) for t in texts] == [
        (k % 2 == 0, k % 2 == 1) for k in range(RUNS)
    ]
    assert all(b.pending == 0 for b in outbox_backlog(store, settings, now=T0 + RUNS * EVERY))
