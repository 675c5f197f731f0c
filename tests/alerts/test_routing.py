"""Routes: which receivers an alert reaches, by severity and check id, with a default.

The routes come from config (`[[alerts.routes]]`, validated at load); the
receivers are recording fakes named like the configured ones, so each test
reads which alerts each receiver got.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from alerts.base import Failure
from alerts.pipeline import ProcessOutcome, process, process_store_error
from alerts.routing import Router
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status, Window
from tests.alerts.conftest import T0, H, make_settings, report
from watchdog.core.errors import ConfigError
from watchdog.core.settings import RouteSettings, Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.plugins import PLUGINS

RECEIVERS: dict[str, Any] = {
    "slack": {"webhook_url": "https://hooks.slack.com/services/T0/B0/x"},
    "webhook": {"team": {"url": "https://hooks.example/alerts"}},
    "pagerduty": {"oncall": {"routing_key": "k" * 32}},
}
ON_CALL = [
    {"severity": "critical", "receivers": ["pagerduty.oncall", "slack"]},
    {"severity": "warning", "receivers": ["slack"]},
]
BREACH_BOTH = {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED}


def routed(routes: list[dict[str, Any]], **alerts: Any) -> Settings:
    return make_settings({"alerts": {**RECEIVERS, "routes": routes, **alerts}})


def receivers() -> dict[str, RecordingNotifier]:
    names = ("slack", "webhook.team", "pagerduty.oncall")
    return {name: RecordingNotifier(name=name) for name in names}


def checks_sent(notifier: RecordingNotifier) -> list[str]:
    """The check ids of every alert this receiver was sent, in order."""
    return [a.check_id for message in notifier.sent for a in message.alerts]


def run(
    store: Store,
    settings: Settings,
    chat: dict[str, RecordingNotifier],
    statuses: dict[str, Status],
) -> ProcessOutcome:
    return process(store, settings, report(T0, statuses), now=T0, notifiers=chat, timer=FakeTimer())


def test_critical_goes_to_pagerduty_and_slack_and_warning_to_slack_only(store: Store) -> None:
    """The first matching route decides: critical pages and posts, warning only posts."""
    chat = receivers()
    run(store, routed(ON_CALL), chat, BREACH_BOTH)
    assert checks_sent(chat["pagerduty.oncall"]) == ["recall_coverage"]
    assert checks_sent(chat["slack"]) == ["recall_coverage", "recall_latency_p95"]


def test_an_alert_no_route_matches_goes_to_the_default_receivers(store: Store) -> None:
    """default_receivers takes what no route matched; receivers outside it get nothing else."""
    chat = receivers()
    settings = routed(ON_CALL[:1], default_receivers=["webhook.team"])
    run(store, settings, chat, BREACH_BOTH)
    assert checks_sent(chat["webhook.team"]) == ["recall_latency_p95"]
    assert checks_sent(chat["slack"]) == ["recall_coverage"]


def test_without_default_receivers_an_unmatched_alert_goes_to_every_receiver(store: Store) -> None:
    """No default_receivers: what no route matches reaches every receiver, so nothing is dropped."""
    chat = receivers()
    run(store, routed(ON_CALL[:1]), chat, BREACH_BOTH)
    for name in chat:
        assert "recall_latency_p95" in checks_sent(chat[name]), name


def test_without_routes_every_receiver_gets_every_alert(store: Store) -> None:
    """A config with receivers and no routes behaves as before routes existed."""
    chat = receivers()
    run(store, routed([]), chat, BREACH_BOTH)
    assert all(len(checks_sent(n)) == 2 for n in chat.values())


def test_continue_adds_the_receivers_of_the_next_matching_route(store: Store) -> None:
    """A route with continue = true lets the next matching route add its receivers."""
    chat = receivers()
    routes = [
        {"checks": ["recall_coverage"], "receivers": ["webhook.team"], "continue": True},
        {"severity": "critical", "receivers": ["pagerduty.oncall"]},
        {"receivers": ["slack"]},
    ]
    run(store, routed(routes), chat, BREACH_BOTH)
    assert checks_sent(chat["webhook.team"]) == ["recall_coverage"]
    assert checks_sent(chat["pagerduty.oncall"]) == ["recall_coverage"]
    assert checks_sent(chat["slack"]) == ["recall_latency_p95"]


def test_the_store_alert_is_routed_by_its_check_id(store: Store) -> None:
    """The `store` pseudo check can be routed by name, like any check."""
    chat = receivers()
    settings = routed(
        [{"checks": ["store"], "receivers": ["pagerduty.oncall"]}], default_receivers="slack"
    )
    window = Window(at=T0, length=4 * H, lookback=24 * H)
    process_store_error(
        store, settings, window, "table x not found", now=T0, notifiers=chat, timer=FakeTimer()
    )
    assert checks_sent(chat["pagerduty.oncall"]) == ["store"]
    assert chat["slack"].sent == [] and chat["webhook.team"].sent == []


def test_one_receivers_outage_does_not_hold_another_receivers_messages(store: Store) -> None:
    """PagerDuty failing leaves its rows pending; Slack's rows for the same alert go out."""
    chat = receivers()
    chat["pagerduty.oncall"].fail_with("PagerDuty answered HTTP 503")
    outcome = run(store, routed(ON_CALL), chat, BREACH_BOTH)
    assert len(chat["slack"].sent) == 1 and outcome.delivery.pending == 1
    assert re.search(r"pagerduty\.oncall .*HTTP 503 \(will retry", outcome.errors[0])
    chat["pagerduty.oncall"].recover()
    later = process(
        store,
        routed(ON_CALL),
        report(T0 + 4 * H, BREACH_BOTH),
        now=T0 + 4 * H,
        notifiers=chat,
        timer=FakeTimer(),
    )
    assert later.delivery.pending == 0
    assert checks_sent(chat["pagerduty.oncall"]) == ["recall_coverage"]


def test_the_router_matches_severity_and_check_together() -> None:
    """Both given, both must match; the first matching route without continue ends the search."""
    router = Router(
        (
            RouteSettings.model_validate(
                {"severity": ["warning"], "checks": ["recall_latency_p95"], "receivers": ["a"]}
            ),
            RouteSettings.model_validate({"severity": "warning", "receivers": ["b"]}),
        ),
        default=("c",),
    )
    assert router.receivers("warning", "recall_latency_p95") == ("a",)
    assert router.receivers("warning", "recall_failure_rate") == ("b",)
    assert router.receivers("critical", "recall_latency_p95") == ("c",)


@pytest.mark.parametrize(
    ("alerts", "key", "problem"),
    [
        (
            {"routes": [{"receivers": ["pagerduty.nobody"]}]},
            "alerts.routes[0].receivers",
            "unknown receiver 'pagerduty.nobody' (configured: pagerduty.oncall, slack, webhook.team)",
        ),
        (
            {"routes": [{"checks": ["recall_coverag"], "receivers": ["slack"]}]},
            "alerts.routes[0].checks",
            "unknown check id 'recall_coverag'",
        ),
        (
            {"routes": [{"severity": "page", "receivers": ["slack"]}]},
            "alerts.routes[0].severity[0]",
            "'page' is not accepted",
        ),
        ({"routes": [{"receivers": []}]}, "alerts.routes[0].receivers", "at least one receiver"),
        (
            {"routes": [{"receivers": ["slack"], "matchers": ["x"]}]},
            "alerts.routes[0].matchers",
            "unknown key (accepted: severity, checks, receivers, continue)",
        ),
        ({"default_receivers": ["email"]}, "alerts.default_receivers", "unknown receiver 'email'"),
    ],
    ids=["receiver", "check", "severity", "empty", "key", "default"],
)
def test_a_bad_route_is_a_config_error_naming_the_key(
    alerts: dict[str, Any], key: str, problem: str
) -> None:
    """Routes are checked at load: the error names the key and what is accepted."""
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"alerts": {**RECEIVERS, **alerts}}, plugins=PLUGINS, env={})
    assert caught.value.key == key
    assert problem in caught.value.problem


def test_a_failing_receiver_is_reported_by_its_own_name(store: Store) -> None:
    """Errors name the receiver (webhook.team), so the operator knows which one to fix."""
    chat = receivers()
    chat["webhook.team"].fail_with("HTTP 404: check alerts.webhook.team.url", Failure.PERMANENT)
    outcome = run(store, routed([]), chat, {"recall_coverage": Status.BREACHED})
    assert outcome.errors[0].startswith("webhook.team (recording): HTTP 404")


def test_routes_reach_alertmanager_and_telegram_by_name(store: Store) -> None:
    """The newer receiver kinds are routed by their names like the others: critical to an
    Alertmanager, the rest to a Telegram chat."""
    settings = make_settings(
        {
            "alerts": {
                "alertmanager": {"am": {"url": "http://127.0.0.1:9093"}},
                "telegram": {"ops": {"bot_token": "123456789:" + "A" * 35, "chat_id": "-100123"}},
                "routes": [
                    {"severity": "critical", "receivers": ["alertmanager.am"]},
                    {"receivers": ["telegram.ops"]},
                ],
            }
        }
    )
    assert sorted(settings.alerts.receivers()) == ["alertmanager.am", "telegram.ops"]
    chat = {name: RecordingNotifier(name=name) for name in ("alertmanager.am", "telegram.ops")}
    run(store, settings, chat, BREACH_BOTH)
    assert checks_sent(chat["alertmanager.am"]) == ["recall_coverage"]
    assert checks_sent(chat["telegram.ops"]) == ["recall_latency_p95"]
