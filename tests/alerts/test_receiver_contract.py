"""The notifier contract: every receiver kind, through its real client, against its stand-in.

One suite over every rig of tests/alerts/receiver_rigs.py (Slack in both
modes, the webhook, PagerDuty, stdout, ...), as APScheduler runs one suite
over every data store: what the outbox relies on (alerts.base.Notifier) holds
for each. Retries wait on a fake timer, so nothing here sleeps except a
request the stand-in answers too late. What is particular to one service
(its format, its own error words) is tested beside it (test_slack.py,
test_receivers.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest

from alerts.base import Deadline, DeliveryError, Failure
from alerts.notifiers import RECEIVERS, build_notifiers
from alerts.testing import FakeTimer
from tests.alerts.conftest import make_settings
from tests.alerts.receiver_rigs import (
    HTTP_RIG_IDS,
    RIG_IDS,
    Rig,
    firing_message,
    kinds_with_a_rig,
    rig_named,
)

MESSAGE = firing_message()


@pytest.fixture(params=RIG_IDS)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from rig_named(request.param)


@pytest.fixture(params=HTTP_RIG_IDS)
def http_rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from rig_named(request.param)


def deadline(timer: FakeTimer | None = None, seconds: float = 60) -> Deadline:
    return Deadline(timedelta(seconds=seconds), timer or FakeTimer())


def test_every_registered_receiver_kind_has_a_rig() -> None:
    """The suite covers every kind of RECEIVERS: a new receiver is tested once it has a rig."""
    assert kinds_with_a_rig() == {receiver.kind for receiver in RECEIVERS}


def test_a_message_is_delivered_once(rig: Rig) -> None:
    """One send is one accepted message at the service, naming the alert."""
    rig.make().send(MESSAGE, deadline())
    (received,) = rig.received()
    assert "recall_coverage" in received
    if rig.http:
        assert len(rig.requests()) == 1


def test_the_config_builds_it_described_without_secrets(rig: Rig) -> None:
    """Its [alerts] table builds this receiver, under its name, described with secrets masked."""
    settings = make_settings({"alerts": rig.table()}, env=rig.env)
    built = build_notifiers(settings)
    assert list(built) == [rig.name]
    receiver = built[rig.name]
    assert receiver.per_alert is next(r for r in RECEIVERS if r.kind == rig.kind).notifier.per_alert
    described = receiver.describe()
    assert described.startswith(rig.name)
    assert not any(secret in described for secret in rig.secrets), described


def test_a_rate_limit_waits_exactly_its_retry_after(http_rig: Rig) -> None:
    """A 429 is retried after exactly the time it asks, through the run's timer."""
    http_rig.reply("rate_limited", 7)
    timer = FakeTimer()
    http_rig.make().send(MESSAGE, deadline(timer))
    assert timer.slept == [7.0]
    assert len(http_rig.requests()) == 2 and len(http_rig.accepted()) == 1


def test_a_rate_limit_beyond_the_deadline_is_left_for_a_later_run(http_rig: Rig) -> None:
    """A wait longer than the run has left is not waited: transient, with when to come back."""
    http_rig.reply("rate_limited", 3600)
    timer = FakeTimer()
    with pytest.raises(DeliveryError) as caught:
        http_rig.make().send(MESSAGE, deadline(timer))
    assert caught.value.failure is Failure.TRANSIENT and caught.value.retry_after == 3600
    assert len(http_rig.requests()) == 1 and timer.slept == []


def test_a_rate_limit_of_ages_is_bounded_to_an_hour(http_rig: Rig) -> None:
    """Whatever a 429 asks, a receiver's messages wait an hour at most."""
    http_rig.reply("rate_limited", 99999999999)
    with pytest.raises(DeliveryError) as caught:
        http_rig.make().send(MESSAGE, deadline())
    assert caught.value.retry_after == 3600


def test_a_server_error_is_retried_after_a_backoff(http_rig: Rig) -> None:
    """A 5xx is retried after base * 2^attempt plus up to half again, then delivered."""
    http_rig.reply("server_error")
    timer = FakeTimer()
    http_rig.make(backoff_base=0.5).send(MESSAGE, deadline(timer))
    assert len(timer.slept) == 1 and 0.5 <= timer.slept[0] <= 0.75
    assert len(http_rig.requests()) == 2 and len(http_rig.accepted()) == 1


def test_a_persistent_server_error_is_transient_after_max_retries(http_rig: Rig) -> None:
    """A service that keeps failing gets 1 + max_retries requests, then a transient error."""
    http_rig.always("server_error")
    with pytest.raises(DeliveryError) as caught:
        http_rig.make(max_retries=2).send(MESSAGE, deadline())
    assert caught.value.failure is Failure.TRANSIENT
    assert re.search(r"HTTP 5\d\d", caught.value.problem), caught.value.problem
    assert len(http_rig.requests()) == 3


def test_retries_stop_within_the_delivery_deadline(http_rig: Rig) -> None:
    """Backoff never sleeps past alerts.delivery_timeout: retries stop while time is left."""
    http_rig.always("server_error")
    timer = FakeTimer()
    with pytest.raises(DeliveryError):
        http_rig.make(backoff_base=10, max_retries=10).send(MESSAGE, deadline(timer))
    assert sum(timer.slept) < 60 and 2 <= len(http_rig.requests()) <= 3


def test_a_request_that_times_out_is_retried(http_rig: Rig) -> None:
    """A request the service answers too late is retried like a connection error."""
    http_rig.reply("timeout", 1.0)
    http_rig.make(timeout_s=0.2).send(MESSAGE, deadline())
    assert len(http_rig.requests()) == 2 and len(http_rig.accepted()) == 1


def test_an_unreachable_service_is_transient_and_names_no_secret(http_rig: Rig) -> None:
    """Connection refused is transient, worded as a connection failure, with no secret in it."""
    receiver = http_rig.make(max_retries=1)
    http_rig.close()
    with pytest.raises(DeliveryError) as caught:
        receiver.send(MESSAGE, deadline())
    assert caught.value.failure is Failure.TRANSIENT
    assert "connection failed" in caught.value.problem
    assert not any(secret in str(caught.value) for secret in http_rig.secrets)


def test_revoked_credentials_are_permanent_after_one_request(http_rig: Rig) -> None:
    """Credentials the service refuses: permanent for the receiver, no retry, the key named."""
    http_rig.always("revoked")
    receiver = http_rig.make()
    with pytest.raises(DeliveryError) as caught:
        receiver.send(MESSAGE, deadline())
    assert caught.value.failure is Failure.PERMANENT
    assert f"alerts.{http_rig.name}" in caught.value.problem
    assert len(http_rig.requests()) == 1


def test_a_malformed_message_is_rejected_not_retried(http_rig: Rig) -> None:
    """A message the service refuses as malformed is rejected (set aside by the outbox)."""
    http_rig.always("malformed")
    with pytest.raises(DeliveryError) as caught:
        http_rig.make().send(MESSAGE, deadline())
    assert caught.value.failure is Failure.REJECTED
    assert len(http_rig.requests()) == http_rig.malformed_requests


def test_secrets_never_show_in_descriptions_errors_or_logs(
    http_rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Every secret is masked in describe(), error lines and the client libraries' debug logs."""
    caplog.set_level(logging.DEBUG)
    receiver = http_rig.make()
    shown = [receiver.describe()]
    for failing in ("revoked", "server_error", "malformed"):
        http_rig.always(failing)
        with pytest.raises(DeliveryError) as caught:
            receiver.send(MESSAGE, deadline())
        shown.append(str(caught.value))
    shown.append(caplog.text)
    leaks = [s for s in http_rig.secrets for text in shown if s in text]
    assert leaks == []
