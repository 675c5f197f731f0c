"""The Alertmanager receiver against a real Alertmanager: fire, silence, resolve, outage, HA pair.

`amtool` reads what Alertmanager holds; Alertmanager's own receiver is a
webhook to our stand-in, so the tests see what Alertmanager sends on. The
evaluation times are the wall clock's (Alertmanager judges `endsAt` by it).
Skipped, saying how to get it, when Alertmanager is not installed. What the
posts carry, rule by rule, is tested against the API stand-in at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from alerts.notifiers import build_notifiers
from alerts.pipeline import ProcessOutcome, process
from alerts.receivers.alertmanager import longest_period, refresh_horizon
from checks.base import Status
from tests.alerts.alertmanager_process import Alertmanager, require, wait_until
from tests.alerts.conftest import SOURCE, make_settings, report
from tests.alerts.http_standin import AlertmanagerStandIn, WebhookStandIn
from watchdog.core.settings import ScheduleSettings, Settings
from watchdog.core.store import Store
from watchdog.core.times import parse_time

BASE_URL = "https://watchdog.example"


@pytest.fixture
def am(tmp_path: Path, hook: WebhookStandIn) -> Iterator[Alertmanager]:
    require()
    server = Alertmanager(tmp_path / "am", hook.url)
    yield server.start()
    server.stop()


def settings_for(*servers: Alertmanager) -> Settings:
    return make_settings(
        {
            "alerts": {
                "delivery_timeout": "10s",
                "alertmanager": {"prod": {"url": [s.url for s in servers], "timeout": "3s"}},
            },
            "report": {"base_url": BASE_URL},
        }
    )


class Clock:
    """Evaluation times on the wall clock, a second apart, each after the last."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)

    def next(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at


def run(
    store: Store, settings: Settings, at: datetime, statuses: dict[str, Status]
) -> ProcessOutcome:
    return process(
        store, settings, report(at, statuses), now=at, notifiers=build_notifiers(settings)
    )


def notified(hook: WebhookStandIn) -> list[tuple[str, str]]:
    """(status, alertname) of every alert Alertmanager's receiver was sent."""
    return [
        (a["status"], a["labels"]["alertname"]) for doc in hook.documents() for a in doc["alerts"]
    ]


def test_a_fired_check_shows_in_amtool_with_its_labels(store: Store, am: Alertmanager) -> None:
    """`amtool alert query` lists the breach: alertname, severity, source, kind; our annotations."""
    settings, clock = settings_for(am), Clock()
    at = clock.next()
    outcome = run(store, settings, at, {"recall_coverage": Status.BREACHED})
    assert outcome.delivery.errors == () and len(outcome.delivery.delivered) == 1
    [alert] = am.alerts()
    assert alert["labels"] == {
        "alertname": "recall_coverage",
        "severity": "critical",
        "source": SOURCE,
        "kind": "coverage",
    }
    assert alert["annotations"]["summary"] == "recall_coverage breached"
    assert alert["annotations"]["description"].startswith("recall_coverage breached with 3.0")
    assert alert["generatorURL"].startswith(f"{BASE_URL}/reports/")
    assert parse_time(alert["startsAt"]) == at
    # Valid beyond the next run: two 4h periods and the 2m delay from now.
    assert parse_time(alert["endsAt"]) > datetime.now(UTC) + timedelta(hours=8)


def test_an_amtool_silence_keeps_it_from_alertmanagers_receivers(
    store: Store, am: Alertmanager, hook: WebhookStandIn
) -> None:
    """`amtool silence add alertname=recall_coverage`: that alert reaches no receiver; others do."""
    silence = am.amtool("silence", "add", "alertname=recall_coverage", "--comment=deploy").strip()
    settings, clock = settings_for(am), Clock()
    run(
        store,
        settings,
        clock.next(),
        {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED},
    )
    wait_until(lambda: ("firing", "recall_latency_p95") in notified(hook), what="p95 notified")
    assert ("firing", "recall_coverage") not in notified(hook)
    assert am.names() == ["recall_latency_p95"]  # the silenced one is not active...
    [silenced] = [
        a for a in am.alerts("--silenced") if a["labels"]["alertname"] == "recall_coverage"
    ]
    assert silenced["status"]["state"] == "suppressed"  # ...but held, by our silence
    assert silenced["status"]["silencedBy"] == [silence]


def test_the_resolve_clears_it(store: Store, am: Alertmanager, hook: WebhookStandIn) -> None:
    """A resolved check leaves `amtool alert query`, and Alertmanager's receiver hears it."""
    settings, clock = settings_for(am), Clock()
    run(store, settings, clock.next(), {"recall_coverage": Status.BREACHED})
    assert am.names() == ["recall_coverage"]
    resolved = run(store, settings, clock.next(), {"recall_coverage": Status.OK})
    assert len(resolved.delivery.delivered) == 1
    assert am.names() == []
    wait_until(lambda: ("resolved", "recall_coverage") in notified(hook), what="resolve notified")


@pytest.mark.slow
def test_a_stopped_alertmanager_loses_nothing(
    store: Store, am: Alertmanager, hook: WebhookStandIn
) -> None:
    """Alertmanager down: the posts wait in the outbox; when it is back, the next run sends them."""
    settings, clock = settings_for(am), Clock()
    am.stop()
    down = run(store, settings, clock.next(), {"recall_coverage": Status.BREACHED})
    assert down.delivery.delivered == () and down.delivery.pending == 1
    assert "connection failed" in down.errors[0]
    am.start()
    back = run(store, settings, clock.next(), {"recall_coverage": Status.BREACHED})
    assert back.delivery.pending == 0 and len(back.delivery.delivered) == 2  # fire, refresh
    assert am.names() == ["recall_coverage"]
    wait_until(lambda: ("firing", "recall_coverage") in notified(hook), what="fire notified")


@pytest.mark.slow
def test_each_alertmanager_of_an_ha_pair_gets_every_post(
    store: Store, tmp_path: Path, hook: WebhookStandIn
) -> None:
    """Two Alertmanagers each hold the alert; one down keeps the post pending until it is back."""
    require()
    pair = [Alertmanager(tmp_path / name, hook.url) for name in ("am1", "am2")]
    for server in pair:
        server.start()
    try:
        settings, clock = settings_for(*pair), Clock()
        run(store, settings, clock.next(), {"recall_coverage": Status.BREACHED})
        assert [s.names() for s in pair] == [["recall_coverage"], ["recall_coverage"]]
        pair[1].stop()
        half = run(store, settings, clock.next(), {"recall_coverage": Status.OK})
        assert half.delivery.pending == 1 and "1 of 2 Alertmanagers" in half.errors[0]
        assert pair[0].names() == []  # the one up resolved it already
        pair[1].start()
        later = run(store, settings, clock.next(), {"recall_coverage": Status.OK})
        assert later.delivery.pending == 0
        assert [s.names() for s in pair] == [[], []]
    finally:
        for server in pair:
            server.stop()


# ---- what each post carries (the API stand-in) -----------------------------------------------


@pytest.fixture
def api() -> Iterator[AlertmanagerStandIn]:
    standin = AlertmanagerStandIn()
    yield standin
    standin.close()


def posted(api: AlertmanagerStandIn) -> list[list[dict[str, Any]]]:
    return [r.body for r in api.delivered()]


def test_a_firing_alert_is_sent_again_at_every_run_valid_past_the_next(
    store: Store, api: AlertmanagerStandIn
) -> None:
    """While firing, every run posts it (reminders every 24h only elsewhere), each valid 8h2m on."""
    settings = make_settings({"alerts": {"alertmanager": {"prod": {"url": api.url}}}})
    start = datetime(2026, 11, 28, 4, tzinfo=UTC)
    for hours in (0, 4, 8):
        run(store, settings, start + timedelta(hours=hours), {"recall_coverage": Status.BREACHED})
    posts = posted(api)
    assert len(posts) == 3
    for hours, [alert] in zip((0, 4, 8), posts, strict=True):
        assert alert["startsAt"] == "2026-11-28T04:00:00Z"
        at = start + timedelta(hours=hours)
        assert parse_time(alert["endsAt"]) >= at + timedelta(hours=8, minutes=2)


def test_a_resolve_ends_at_its_resolve_time(store: Store, api: AlertmanagerStandIn) -> None:
    """The resolve posts endsAt = the evaluation that resolved it; startsAt the episode's start."""
    settings = make_settings({"alerts": {"alertmanager": {"prod": {"url": api.url}}}})
    start = datetime(2026, 11, 28, 4, tzinfo=UTC)
    run(store, settings, start, {"recall_coverage": Status.BREACHED})
    run(store, settings, start + timedelta(hours=4), {"recall_coverage": Status.OK})
    [resolved] = posted(api)[-1]
    assert (resolved["startsAt"], resolved["endsAt"]) == (
        "2026-11-28T04:00:00Z",
        "2026-11-28T08:00:00Z",
    )
    assert "generatorURL" not in resolved  # no report.base_url: no link


def test_a_silenced_alert_is_not_refreshed(store: Store, api: AlertmanagerStandIn) -> None:
    """A watchdog silence sends nothing, refreshes included (Alertmanager lets the alert expire)."""
    from alerts.silences import add_silence

    settings = make_settings({"alerts": {"alertmanager": {"prod": {"url": api.url}}}})
    start = datetime(2026, 11, 28, 4, tzinfo=UTC)
    run(store, settings, start, {"recall_coverage": Status.BREACHED})
    add_silence(
        store,
        settings,
        check_id="recall_coverage",
        ends_at=start + timedelta(days=1),
        reason="test",
        created_by="test",
        now=start + timedelta(hours=1),
    )
    run(store, settings, start + timedelta(hours=4), {"recall_coverage": Status.BREACHED})
    assert len(posted(api)) == 1


def test_labels_are_bounded_and_annotations_carry_the_words(
    store: Store, api: AlertmanagerStandIn
) -> None:
    """Labels: alertname, severity, source, kind and nothing else; evidence ids in annotations."""
    settings = make_settings({"alerts": {"alertmanager": {"prod": {"url": api.url}}}})
    start = datetime(2026, 11, 28, 4, tzinfo=UTC)
    run(store, settings, start, {"recall_coverage": Status.BREACHED, "store": Status.OK})
    [alert] = posted(api)[0]
    assert set(alert["labels"]) == {"alertname", "severity", "source", "kind"}
    assert alert["annotations"]["evidence"] == "sessions: s-1, s-2, s-3"


@pytest.mark.parametrize(
    ("schedule", "horizon"),
    [
        ({}, timedelta(hours=8, minutes=2)),
        ({"every": "1h", "delay": "5m"}, timedelta(hours=2, minutes=5)),
        ({"cron": "0 9 * * 1-5"}, 2 * timedelta(days=3) + timedelta(minutes=2)),
    ],
    ids=["default", "every", "cron-weekdays"],
)
def test_the_horizon_covers_the_next_run_its_delay_and_one_more(
    schedule: dict[str, str], horizon: timedelta
) -> None:
    """endsAt's horizon: two of the schedule's longest periods plus its delay (a weekend for cron)."""
    settings = ScheduleSettings.model_validate(schedule)
    assert refresh_horizon(settings) == horizon
    assert longest_period(settings) == (horizon - settings.delay) / 2
