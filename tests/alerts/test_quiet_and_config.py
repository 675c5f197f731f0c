"""Quiet hours and the [alerts] config: validated at load time, secrets never shown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from alerts.notifiers import RECEIVERS
from watchdog.core.errors import ConfigError
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import settings_from_mapping, settings_model
from watchdog.core.settings.load import secret_keys
from watchdog.runner.plugins import PLUGINS

WEBHOOK = "https://hooks.slack.com/services/T0/B0/s3cr3t"


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 28, hour, minute, tzinfo=UTC)


def test_quiet_hours_wrap_midnight() -> None:
    """22:00-07:00 is quiet at 23:30 and 06:59, not at 07:00 or 21:59."""
    quiet = QuietHours.parse("22:00-07:00")
    assert quiet.active(at(23, 30)) and quiet.active(at(6, 59))
    assert not quiet.active(at(7)) and not quiet.active(at(21, 59))
    assert quiet.ends_after(at(23, 30)) == datetime(2026, 11, 29, 7, tzinfo=UTC)
    assert quiet.ends_after(at(3)) == at(7)


def test_quiet_hours_follow_their_time_zone() -> None:
    """Quiet hours are local wall time: 22:00-07:00 in Sao Paulo (UTC-3) is 01:00-10:00 UTC."""
    quiet = QuietHours.parse("22:00-07:00", "America/Sao_Paulo")
    assert quiet.active(at(9, 59)) and not quiet.active(at(10))
    assert quiet.ends_after(at(2)) == at(10)


def test_daytime_range() -> None:
    """A range that does not wrap (12:00-13:00) is quiet only inside it."""
    quiet = QuietHours.parse("12:00-13:00")
    assert quiet.active(at(12, 30)) and not quiet.active(at(13)) and not quiet.active(at(11))


@pytest.mark.parametrize(
    ("alerts", "key", "words"),
    [
        (
            {"slack": {"webhook_url": WEBHOOK, "quiet_hours": "22-07"}},
            "alerts.slack.quiet_hours",
            "HH:MM-HH:MM",
        ),
        (
            {"slack": {"webhook_url": WEBHOOK, "quiet_timezone": "Moon/Base"}},
            "alerts.slack.quiet_timezone",
            "IANA",
        ),
        ({"slack": {"token": "xoxb-1"}}, "alerts.slack", "token needs channel"),
        (
            {"slack": {"webhook_url": WEBHOOK, "token": "xoxb-1", "channel": "#a"}},
            "alerts.slack",
            "exactly one",
        ),
        (
            {"slack": {"webhook_url": "hooks.slack.com/s3cr3t"}},
            "alerts.slack",
            "not an http(s) URL",
        ),
        ({"stdout": {"quiet_hours": "07:00-07:00"}}, "alerts.stdout.quiet_hours", "empty"),
        ({"repeat_interval": "0s"}, "alerts", "must be positive"),
        ({"pending_runs": 0}, "alerts.pending_runs", "greater than or equal to 1"),
        ({"teams": {}}, "alerts.teams", "unknown key"),
        ({"alertmanager": {"p": {"url": []}}}, "alerts.alertmanager.p.url", "at least one"),
        (
            {"alertmanager": {"p": {"url": "http://am:s3cr3t@am:9093"}}},
            "alerts.alertmanager.p.url",
            "basic_auth_user and basic_auth_password, not in the URL",
        ),
        (
            {"alertmanager": {"p": {"url": "http://am:9093", "basic_auth_user": "w"}}},
            "alerts.alertmanager.p",
            "go together",
        ),
        (
            {
                "alertmanager": {
                    "p": {
                        "url": ["http://am1:9093", "http://am1:9093"],
                    }
                }
            },
            "alerts.alertmanager.p.url",
            "twice",
        ),
        (
            {"telegram": {"ops": {"bot_token": "s3cr3t", "chat_id": "1"}}},
            "alerts.telegram.ops.bot_token",
            "not a bot token",
        ),
        (
            {"telegram": {"ops": {"bot_token": "1:" + "s3cr3t" * 5, "chat_id": "ops chat"}}},
            "alerts.telegram.ops.chat_id",
            "not a chat id",
        ),
        ({"telegram": {"ops": {"chat_id": "1"}}}, "alerts.telegram.ops.bot_token", "required"),
    ],
)
def test_bad_alert_config_names_the_key(alerts: dict[str, object], key: str, words: str) -> None:
    """Each bad [alerts] value is a config error naming its key, without echoing a secret."""
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"alerts": alerts}, plugins=PLUGINS, env={})
    assert caught.value.key == key and words in caught.value.problem
    assert "s3cr3t" not in str(caught.value)


def test_secrets_are_hidden_in_the_settings_repr() -> None:
    """webhook_url and token are SecretStr: no repr or dump of the settings shows them."""
    settings = settings_from_mapping(
        {"alerts": {"slack": {"webhook_url": "${HOOK}"}}}, plugins=PLUGINS, env={"HOOK": WEBHOOK}
    )
    assert settings.alerts.slack is not None
    assert settings.alerts.slack.webhook_url is not None
    assert settings.alerts.slack.webhook_url.get_secret_value() == WEBHOOK
    assert "s3cr3t" not in repr(settings) and "s3cr3t" not in str(settings.model_dump())


def test_every_registered_notifier_is_a_config_key() -> None:
    """The registry and the config model name the same notifiers."""
    alerts = settings_model(PLUGINS).model_fields["alerts"].annotation
    assert alerts is not None
    assert {receiver.kind for receiver in RECEIVERS} <= set(alerts.model_fields)


def test_the_receiver_lists_are_derived_from_the_registry() -> None:
    """Secret keys, tables and [alerts]' fields come from each receiver's settings model."""
    assert PLUGINS.receivers == RECEIVERS
    assert {"telegram.bot_token", "alertmanager.basic_auth_password"} <= secret_keys(PLUGINS)
    assert "[alerts.telegram.<name>]" in PLUGINS.receiver_tables()
    assert {r.kind for r in RECEIVERS if r.model.machine} == {
        "webhook",
        "pagerduty",
        "alertmanager",
    }
