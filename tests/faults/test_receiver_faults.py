"""Receiver faults across runs (webhook, PagerDuty, Alertmanager, Telegram): a 10-minute outage of each kind.

As tests/faults/test_chat_faults.py does for Slack: the real alert pipeline
runs every 2 simulated minutes, each run announcing one transition, with
the receiver's real HTTP client (urllib, `alerts.receivers.http`) talking to
its local stand-in through a fault proxy. Whatever the fault, the outbox
loses nothing, duplicates nothing, keeps the order (a PagerDuty resolve
never overtakes its trigger), and makes a bounded number of requests per
run. A crash between the receiver's OK and the `delivered` mark resends
that message once, never more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from alerts.base import Deadline, Message, Notifier
from alerts.notifiers import (
    AlertmanagerNotifier,
    PagerDutyNotifier,
    TelegramNotifier,
    WebhookNotifier,
)
from alerts.pipeline import ProcessOutcome, process
from alerts.records import outbox_backlog
from alerts.testing import FakeTimer
from checks.base import Status
from tests.alerts.conftest import T0, make_settings, report
from tests.alerts.http_standin import (
    EVENTS_PATH,
    OK,
    ROUTING_KEY,
    SERVER_ERROR,
    UNAUTHORIZED,
    WEBHOOK_PATH,
    AlertmanagerStandIn,
    HttpStandIn,
    PagerDutyStandIn,
    Reply,
    WebhookStandIn,
    rate_limited,
    timeout,
)
from tests.alerts.telegram_standin import BOT_TOKEN, CHAT_ID, TelegramStandIn
from tests.faults.proxy import FaultProxy
from watchdog.core.store import Store

MINUTE = timedelta(minutes=1)
EVERY = 2 * MINUTE
RUNS = 11  # minutes 0, 2, ..., 20
OUTAGE = (3 * MINUTE, 13 * MINUTE)  # the runs at 4, 6, 8, 10 and 12 fail
MAX_RETRIES = 3


@dataclass
class Counting:
    """A real receiver, counting the sends the outbox asks of it."""

    inner: Any
    sends: int = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def quiet_hours(self) -> None:
        return None

    @property
    def per_alert(self) -> bool:
        return bool(self.inner.per_alert)

    def describe(self) -> str:
        return str(self.inner.describe())

    def send(self, message: Message, deadline: Deadline) -> None:
        self.sends += 1
        self.inner.send(message, deadline)


@dataclass
class Kind:
    """One receiver kind: its stand-in, and its real receiver reaching it at `port`."""

    name: str
    standin: Callable[[], HttpStandIn]
    receiver: Callable[[int], Any]

    texts: Callable[[Any], list[tuple[str, str]]]  # (status, check) of each alert taken


def _pagerduty_texts(standin: PagerDutyStandIn) -> list[tuple[str, str]]:
    return [
        ("firing" if e["event_action"] == "trigger" else "resolved", e["dedup_key"])
        for e in standin.events()
    ]


def _webhook_texts(standin: WebhookStandIn) -> list[tuple[str, str]]:
    return [
        (a["status"], a["labels"]["alertname"])
        for document in standin.delivered()
        for a in document.body["alerts"]
    ]


def _alertmanager_texts(standin: AlertmanagerStandIn) -> list[tuple[str, str]]:
    """A resolve ends at the evaluation that resolved it: its window's end."""
    return [
        (
            "resolved" if a["endsAt"] == a["annotations"]["window"].split("/")[1] else "firing",
            a["labels"]["alertname"],
        )
        for a in standin.alerts()
    ]


def _telegram_texts(standin: TelegramStandIn) -> list[tuple[str, str]]:
    found = []
    for text in standin.messages():
        for status, check in re.findall(r"(FIRING|RESOLVED) (\w+) \[", text):
            found.append(("firing" if status == "FIRING" else "resolved", check))
    return found


KINDS = [
    Kind(
        "webhook",
        WebhookStandIn,
        lambda port: WebhookNotifier(
            url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}",
            name="webhook.team",
            timeout_s=0.3,
            max_retries=MAX_RETRIES,
            backoff_base=0.5,
        ),
        _webhook_texts,
    ),
    Kind(
        "pagerduty",
        PagerDutyStandIn,
        lambda port: PagerDutyNotifier(
            routing_key=ROUTING_KEY,
            url=f"http://127.0.0.1:{port}{EVENTS_PATH}",
            name="pagerduty.oncall",
            timeout_s=0.3,
            max_retries=MAX_RETRIES,
            backoff_base=0.5,
        ),
        _pagerduty_texts,
    ),
    Kind(
        "alertmanager",
        AlertmanagerStandIn,
        lambda port: AlertmanagerNotifier(
            urls=[f"http://127.0.0.1:{port}"],
            name="alertmanager.prod",
            timeout_s=0.3,
            max_retries=MAX_RETRIES,
            backoff_base=0.5,
        ),
        _alertmanager_texts,
    ),
    Kind(
        "telegram",
        TelegramStandIn,
        lambda port: TelegramNotifier(
            bot_token=BOT_TOKEN,
            chat_id=CHAT_ID,
            api_url=f"http://127.0.0.1:{port}",
            name="telegram.ops",
            timeout_s=0.3,
            max_retries=MAX_RETRIES,
            backoff_base=0.5,
        ),
        _telegram_texts,
    ),
]


@dataclass
class Outage:
    name: str
    start: Callable[[HttpStandIn, FaultProxy], None]
    stop: Callable[[HttpStandIn, FaultProxy], None] = field(
        default=lambda standin, proxy: (setattr(standin, "default", OK), proxy.set_mode("pass"))
    )
    max_requests: int = 1 + MAX_RETRIES  # per run, whatever the backlog


def replying(reply: Reply) -> Callable[[HttpStandIn, FaultProxy], None]:
    return lambda standin, proxy: setattr(standin, "default", reply)


def proxy_mode(mode: str) -> Callable[[HttpStandIn, FaultProxy], None]:
    return lambda standin, proxy: proxy.set_mode(mode)


OUTAGES = [
    # Retry-After 90s is more than the run's deadline allows: one request per run.
    Outage("rate_limited_retry_after", replying(rate_limited(90)), max_requests=1),
    Outage("server_error_500", replying(SERVER_ERROR)),
    Outage("timeout", replying(timeout(1.0))),
    Outage("connection_refused", proxy_mode("refuse")),
    Outage("connection_reset", proxy_mode("reset")),
    # Credentials revoked: permanent for the receiver, one request per run.
    Outage("unauthorized_401", replying(UNAUTHORIZED), max_requests=1),
]


# Which outage reaches which receiver. An answer (429, 500, 401) is read by each receiver's
# own classification (`_classify`: Telegram's and PagerDuty's read the body too), so every
# receiver meets every answer. A transport fault (timeout, refused, reset) is an OSError in
# the shared client (`JsonPost.send` of alerts/receivers/http.py), the same code whatever the
# receiver: it reaches the receiver's own `send` as the transient DeliveryError a 500 raises
# there. The webhook and PagerDuty (the one per alert, reading the body of a success) meet
# every transport fault; Alertmanager and Telegram meet the answers, their transient path
# is the 500's.
ANSWERED = {"rate_limited_retry_after", "server_error_500", "unauthorized_401"}
CASES = [
    pytest.param(k, o, id=f"{k.name}-{o.name}")
    for k in KINDS
    for o in OUTAGES
    if k.name in ("webhook", "pagerduty") or o.name in ANSWERED
]


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def standin(kind: Kind) -> Iterator[HttpStandIn]:
    server = kind.standin()
    yield server
    server.close()


@pytest.fixture
def proxy(standin: HttpStandIn) -> Iterator[FaultProxy]:
    with FaultProxy(standin.port) as fault_proxy:
        yield fault_proxy


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "outage"), CASES, indirect=["kind"])
def test_a_ten_minute_receiver_outage_loses_nothing_duplicates_nothing_and_never_storms(
    store: Store, kind: Kind, standin: HttpStandIn, proxy: FaultProxy, outage: Outage
) -> None:
    """Runs during the outage keep every message; the first run after delivers all, in order, once."""
    settings = make_settings()
    receiver = Counting(kind.receiver(proxy.port))
    notifiers: dict[str, Notifier] = {receiver.name: receiver}
    enqueued: list[str] = []
    delivered: list[str] = []
    outcomes: list[tuple[datetime, bool, ProcessOutcome, int]] = []
    down = False
    for k in range(RUNS):
        elapsed = k * EVERY
        now = T0 + elapsed
        if not down and OUTAGE[0] <= elapsed < OUTAGE[1]:
            outage.start(standin, proxy)
            down = True
        elif down and elapsed >= OUTAGE[1]:
            outage.stop(standin, proxy)
            down = False
        status = Status.BREACHED if k % 2 == 0 else Status.OK  # one transition per run
        timer = FakeTimer()
        sends_before = receiver.sends
        outcome = process(
            store,
            settings,
            report(now, {"recall_coverage": status}),
            now=now,
            notifiers=notifiers,
            timer=timer,
        )
        requests = (receiver.sends - sends_before) + len(timer.slept)
        enqueued.extend(outcome.enqueued)
        delivered.extend(outcome.delivery.delivered)
        outcomes.append((now, down, outcome, requests))

    failing = [(o, n) for _, is_down, o, n in outcomes if is_down]
    assert len(failing) == 5
    for outcome, requests in failing:
        assert outcome.delivery.delivered == ()
        assert 1 <= requests <= outage.max_requests, requests
        assert len(outcome.errors) == 1
    assert failing[-1][0].delivery.pending == 5
    first_after = next(o for _, is_down, o, _ in outcomes[3:] if not is_down)
    assert len(first_after.delivery.delivered) == 6
    assert len(enqueued) == RUNS
    assert delivered == enqueued
    accepted = kind.texts(standin)
    assert len(accepted) == RUNS  # each alert once at the receiver
    assert [status for status, _ in accepted] == [
        "firing" if k % 2 == 0 else "resolved" for k in range(RUNS)
    ]
    if isinstance(standin, PagerDutyStandIn):  # every incident opened was closed, in order
        assert set(standin.incidents().values()) == {"resolved", "triggered"}
        assert list(standin.incidents().values()).count("triggered") == 1  # the last breach
    assert all(b.pending == 0 for b in outbox_backlog(store, settings, now=T0 + RUNS * EVERY))


class Crash(BaseException):
    """The process dies: nothing after it runs (not an Exception: no handler catches it)."""


@dataclass
class CrashAfterSend:
    """The real receiver; after its first successful send the process 'dies' before the mark."""

    inner: Any
    crashed: bool = False

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def quiet_hours(self) -> None:
        return None

    @property
    def per_alert(self) -> bool:
        return bool(self.inner.per_alert)

    def describe(self) -> str:
        return str(self.inner.describe())

    def send(self, message: Message, deadline: Deadline) -> None:
        self.inner.send(message, deadline)
        if not self.crashed:
            self.crashed = True
            raise Crash


def test_a_crash_between_the_receivers_ok_and_the_mark_sends_that_message_once_more(
    store: Store, kind: Kind, standin: HttpStandIn
) -> None:
    """The receiver accepted, the row was not marked: the next run resends it once, then never."""
    settings = make_settings()
    receiver = CrashAfterSend(kind.receiver(standin.port))
    notifiers: dict[str, Notifier] = {receiver.name: receiver}
    with pytest.raises(Crash):
        process(
            store,
            settings,
            report(T0, {"recall_coverage": Status.BREACHED}),
            now=T0,
            notifiers=notifiers,
            timer=FakeTimer(),
        )
    for k in (1, 2, 3):
        process(
            store,
            settings,
            report(T0 + k * EVERY, {"recall_coverage": Status.BREACHED}),
            now=T0 + k * EVERY,
            notifiers=notifiers,
            timer=FakeTimer(),
        )
    accepted = kind.texts(standin)
    assert accepted == [accepted[0], accepted[0]]  # the one message, twice: never lost, never more
    assert all(b.pending == 0 for b in outbox_backlog(store, settings, now=T0 + 4 * EVERY))
