"""The webhook and PagerDuty receivers through their real HTTP client, against local stand-ins.

Formats (Alertmanager's webhook JSON, PagerDuty's Events API v2 events) are
checked on what the stand-ins received from a real alert pipeline run; the
failure handling (429 with Retry-After, 5xx, timeouts, redirects, permanent
and rejected answers) on single sends whose retries wait on a fake timer.
What of a webhook's URL shows (what the config file wrote, never what the
environment gave), and how credentials in it are sent
(docs/alerts.md#receivers-and-routes).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from alerts.base import Deadline, DeliveryError, Failure, Message
from alerts.facts import alert_key
from alerts.notifiers import PagerDutyNotifier, WebhookNotifier, build_notifiers
from alerts.pipeline import ProcessOutcome, process
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import SOURCE, T0, H, make_settings, report
from tests.alerts.http_standin import (
    BAD_REQUEST,
    BEARER,
    ECHO,
    NOT_FOUND,
    REDIRECT,
    ROUTING_KEY,
    UNAUTHORIZED,
    WEBHOOK_PATH,
    AlertmanagerStandIn,
    PagerDutyStandIn,
    WebhookStandIn,
    rate_limited,
)
from tests.alerts.telegram_standin import BOT_TOKEN, CHAT_ID, TelegramStandIn
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import parse_time

BASE_URL = "https://watchdog.example"
BIN = Path(sys.executable).parent / "memory-watchdog"


@pytest.fixture
def pd() -> Iterator[PagerDutyStandIn]:
    standin = PagerDutyStandIn()
    yield standin
    standin.close()


def webhook(hook: WebhookStandIn, **options: Any) -> WebhookNotifier:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("timeout_s", 2.0)
    return WebhookNotifier(url=hook.url, name="webhook.team", **options)


def pagerduty(pd: PagerDutyStandIn, **options: Any) -> PagerDutyNotifier:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("timeout_s", 2.0)
    return PagerDutyNotifier(
        routing_key=options.pop("routing_key", ROUTING_KEY),
        url=pd.url,
        name="pagerduty.oncall",
        **options,
    )


def settings_with_link() -> Settings:
    return make_settings({"report": {"base_url": BASE_URL}})


def run(
    store: Store,
    settings: Settings,
    hours: int,
    statuses: dict[str, Status],
    **notifiers: Any,
) -> ProcessOutcome:
    """One evaluation at T0 + hours through the pipeline, delivered to these receivers."""
    at = T0 + hours * H
    named = {n.name: n for n in notifiers.values()}
    return process(
        store, settings, report(at, statuses), now=at, notifiers=named, timer=FakeTimer()
    )


def firing_message(store: Store) -> Message:
    """The message a breach of recall_coverage makes (as the outbox hands it to a receiver)."""
    recorder = RecordingNotifier()
    run(store, make_settings(), 0, {"recall_coverage": Status.BREACHED}, recorder=recorder)
    [message] = recorder.sent
    return message


def deadline(timer: FakeTimer, seconds: float = 60) -> Deadline:
    return Deadline(timedelta(seconds=seconds), timer)


# ---- the Alertmanager webhook format --------------------------------------------------------


def test_webhook_body_follows_alertmanager_webhook_format_version_4(
    store: Store, hook: WebhookStandIn
) -> None:
    """A firing alert arrives as Alertmanager's webhook JSON: labels, annotations, times, link."""
    run(store, settings_with_link(), 0, {"recall_coverage": Status.BREACHED}, hook=webhook(hook))
    [document] = hook.documents()
    assert document["version"] == "4"
    assert document["status"] == "firing"
    assert document["receiver"] == "webhook.team"
    assert document["truncatedAlerts"] == 0
    assert document["groupLabels"] == {"source": SOURCE}
    assert document["groupKey"] == f'{{}}:{{source="{SOURCE}"}}'
    assert document["externalURL"] == ""
    [alert] = document["alerts"]
    assert alert["status"] == "firing"
    assert alert["labels"] == {
        "alertname": "recall_coverage",
        "severity": "critical",
        "source": SOURCE,
    }
    assert alert["annotations"]["summary"] == "recall_coverage breached"
    assert alert["annotations"]["description"].startswith("recall_coverage breached with 3.0")
    assert alert["annotations"]["evidence"] == "sessions: s-1, s-2, s-3"
    assert alert["startsAt"] == "2026-11-28T04:00:00Z"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["generatorURL"] == f"{BASE_URL}/reports/20261128T040000Z"
    assert len(alert["fingerprint"]) == 16
    assert document["commonLabels"] == alert["labels"]


def test_webhook_resolve_carries_the_episode_start_and_its_end(
    store: Store, hook: WebhookStandIn
) -> None:
    """A resolve is status resolved, startsAt the episode's start, endsAt the evaluation that ended it."""
    settings = make_settings()
    run(store, settings, 0, {"recall_coverage": Status.BREACHED}, hook=webhook(hook))
    run(store, settings, 4, {"recall_coverage": Status.OK}, hook=webhook(hook))
    fired, resolved = hook.documents()
    assert resolved["status"] == "resolved"
    [alert] = resolved["alerts"]
    assert alert["status"] == "resolved"
    assert alert["startsAt"] == "2026-11-28T04:00:00Z"
    assert alert["endsAt"] == "2026-11-28T08:00:00Z"
    assert alert["generatorURL"] == ""  # no report.base_url
    assert alert["fingerprint"] == fired["alerts"][0]["fingerprint"]
    assert fired["alerts"][0]["annotations"]["cause"] == "breached"
    assert alert["annotations"]["cause"] == "resolved"  # not what it had fired for


def test_webhook_groups_one_evaluation_and_names_only_common_labels(
    store: Store, hook: WebhookStandIn
) -> None:
    """Two alerts of one evaluation are one POST; commonLabels keeps only what they share."""
    run(
        store,
        make_settings(),
        0,
        {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED},
        hook=webhook(hook),
    )
    [document] = hook.documents()
    assert [a["labels"]["alertname"] for a in document["alerts"]] == [
        "recall_coverage",
        "recall_latency_p95",
    ]
    assert document["commonLabels"] == {"source": SOURCE}


def test_webhook_sends_the_bearer_token_and_never_shows_it(
    hook: WebhookStandIn, store: Store
) -> None:
    """The bearer token goes in Authorization; describe and error lines mask it and the URL path."""
    message = firing_message(store)
    receiver = webhook(hook, bearer_token=BEARER, max_retries=0)
    receiver.send(message, deadline(FakeTimer()))
    assert hook.requests[-1].headers["Authorization"] == f"Bearer {BEARER}"
    hook.reply(UNAUTHORIZED)
    with pytest.raises(DeliveryError) as caught:
        receiver.send(message, deadline(FakeTimer()))
    shown = receiver.describe() + caught.value.problem
    assert BEARER not in shown and WEBHOOK_PATH not in shown
    assert "check alerts.webhook.team.bearer_token" in caught.value.problem


# ---- the webhook's failures (the rest: tests/alerts/test_receiver_contract.py) --------------


@pytest.mark.parametrize(
    ("reply", "failure"),
    [(NOT_FOUND, Failure.PERMANENT), (REDIRECT, Failure.PERMANENT)],
    ids=["404", "302"],
)
def test_webhook_client_errors_are_not_retried(
    store: Store, hook: WebhookStandIn, reply: Any, failure: Failure
) -> None:
    """A 404 or a redirect is permanent for the receiver; one request, the redirect not followed."""
    message = firing_message(store)
    hook.reply(reply)
    with pytest.raises(DeliveryError) as caught:
        webhook(hook).send(message, deadline(FakeTimer()))
    assert caught.value.failure is failure
    assert len(hook.requests) == 1
    assert [r.path for r in hook.requests] == [WEBHOOK_PATH]  # the redirect was not followed


# ---- what of the webhook's URL shows: what the file wrote, never what the environment gave ---

TOKEN = "s3cr3t-hook-token"  # the secret part of a path, from the environment


def configured_webhook(url: str, env: dict[str, str] | None = None) -> WebhookNotifier:
    """The webhook receiver `[alerts.webhook.team]` builds, `url` as the file writes it."""
    settings = make_settings(
        {"alerts": {"webhook": {"team": {"url": url, "bearer_token": BEARER}}}}, env=env
    )
    receiver = build_notifiers(settings)["webhook.team"]
    assert isinstance(receiver, WebhookNotifier)
    return receiver


def echoed_failure(hook: WebhookStandIn, receiver: WebhookNotifier, message: Message) -> str:
    """The error line of a delivery the consumer refuses, echoing the path's last segment."""
    hook.reply(ECHO)
    with pytest.raises(DeliveryError) as caught:
        receiver.send(message, deadline(FakeTimer()))
    assert "no such hook" in caught.value.problem
    return str(caught.value)


def test_a_webhook_path_written_in_the_config_is_shown(hook: WebhookStandIn, store: Store) -> None:
    """A URL the file writes shows its scheme, host, port and path, in its description and its
    error lines, so that one can check which path is configured; the bearer token stays masked."""
    url = f"{hook.base}/alerts/memory-watchdog-team"
    receiver = configured_webhook(url)
    assert receiver.describe() == f"webhook.team (Alertmanager webhook {url}, bearer token ***)"
    line = echoed_failure(hook, receiver, firing_message(store))
    assert "no such hook memory-watchdog-team" in line
    assert BEARER not in line + receiver.describe()
    assert hook.requests[-1].path == "/alerts/memory-watchdog-team"


@pytest.mark.parametrize(
    ("written", "env", "shown"),
    [
        ("{base}/hooks/${{HOOK_TOKEN}}", {"HOOK_TOKEN": TOKEN}, "{base}/hooks/${{HOOK_TOKEN}}"),
        (
            "{base}/services/${{HOOK_TOKEN}}",
            {"HOOK_TOKEN": f"T0/B0/{TOKEN}"},
            "{base}/services/${{HOOK_TOKEN}}",
        ),
        ("${{HOOK_URL}}", {"HOOK_URL": f"{{base}}/hooks/{TOKEN}"}, "{base}/hooks/***"),
        ("{base}/hooks/${{HOOK_TOKEN:-{token}}}", {}, "{base}/hooks/${{HOOK_TOKEN:-***}}"),
    ],
    ids=["a-segment", "segments", "the-whole-url", "a-default"],
)
def test_a_webhook_token_from_the_environment_never_shows(
    hook: WebhookStandIn, store: Store, written: str, env: dict[str, str], shown: str
) -> None:
    """What a `${NAME}` gave (or its default) shows as the reference, whole URLs as before:
    in the description, the error line, the run's errors (the daemon logs them) and the outbox."""
    base = hook.base
    values = {k: v.format(base=base) for k, v in env.items()}
    url = written.format(base=base, token=TOKEN)
    receiver = configured_webhook(url, values)
    assert receiver.describe() == (
        f"webhook.team (Alertmanager webhook {shown.format(base=base)}, bearer token ***)"
    )
    assert TOKEN not in echoed_failure(hook, receiver, firing_message(store))
    assert hook.requests[-1].path.endswith(f"/{TOKEN}")  # it was sent the token
    settings = make_settings({"alerts": {"webhook": {"team": {"url": url}}}}, env=values)
    hook.default = ECHO
    outcome = run(
        store, settings, 0, {"recall_coverage": Status.BREACHED}, **build_notifiers(settings)
    )
    assert outcome.delivery.pending == 1 and "no such hook" in outcome.errors[0]
    rows = store.query(f"SELECT last_error FROM `{settings.store.database}`.outbox FINAL").rows
    stored = " ".join(str(row[0]) for row in rows)
    assert "no such hook" in stored
    assert TOKEN not in " ".join(outcome.errors) + stored


def test_a_webhook_password_holding_an_at_sign_never_shows(
    hook: WebhookStandIn, store: Store
) -> None:
    """A password in the URL's userinfo, written in the file, `@` and `/` in it, shows as `***`;
    the user, host, port and path as written; each query value is masked."""
    password = "p@ss/w0rd@s3cr3t"
    path = "/alerts/memory-watchdog-team"
    receiver = configured_webhook(f"http://bot:{password}@127.0.0.1:{hook.port}{path}?key=v4lue")
    assert receiver.describe() == (
        f"webhook.team (Alertmanager webhook http://bot:***@127.0.0.1:{hook.port}{path}?key=***,"
        " bearer token ***)"
    )
    message = firing_message(store)
    with pytest.raises(DeliveryError) as caught:  # unencoded, the `/` ends the authority
        receiver.send(message, deadline(FakeTimer()))
    shown = str(caught.value) + receiver.describe()
    assert not any(part in shown for part in (password, "p@ss", "w0rd@s3cr3t", "v4lue"))


def test_credentials_in_a_webhook_url_are_sent_as_basic_auth(
    hook: WebhookStandIn, store: Store
) -> None:
    """`https://user:pass@host/path` authenticates as curl and Alertmanager do: Basic auth from
    the userinfo (percent-decoded), the request to the URL without it; the password never shows.
    (urllib alone read `bot:p%40ss@127.0.0.1` as a host with a port and failed every send.)"""
    path = "/alerts/memory-watchdog-team"
    url = f"http://bot:p%40ss%2Fw0rd@127.0.0.1:{hook.port}{path}"
    receiver = WebhookNotifier(url=url, name="webhook.team", backoff_base=0.01, max_retries=0)
    message = firing_message(store)
    receiver.send(message, deadline(FakeTimer()))
    request = hook.requests[-1]
    assert request.path == path
    assert (
        request.headers["Authorization"] == "Basic " + base64.b64encode(b"bot:p@ss/w0rd").decode()
    )
    hook.reply(UNAUTHORIZED)
    with pytest.raises(DeliveryError) as caught:
        receiver.send(message, deadline(FakeTimer()))
    shown = str(caught.value) + receiver.describe()
    secret = request.headers["Authorization"].removeprefix("Basic ")
    assert not any(part in shown for part in ("p%40ss", "p@ss", "w0rd", secret))


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("https://t0ken@alerts.example.com/hooks/a", "https://***@alerts.example.com/hooks/a"),
        ("https://bot:${PW}@alerts.example.com/a", "https://bot:***@alerts.example.com/a"),
        ("https://${U:-bot}:pw@alerts.example.com/a", "https://${U:-***}:***@alerts.example.com/a"),
        ("https://h.example/a?key=v&flag#frag", "https://h.example/a?key=***&***#***"),
        ("https://h.example/a?key=${KEY}", "https://h.example/a?key=***"),
        ("https://h.example/users/ops@example.com", "https://h.example/users/ops@example.com"),
        ("${BASE}/hooks/team", "${BASE}/hooks/team"),
        ("https://${HOST}/hooks/team", "https://${HOST}/hooks/team"),
        (
            "https://x.webhook.office.com/webhookb2/a/b/c",
            "https://x.webhook.office.com/webhookb2/***",
        ),
        ("https://discord.com/api/webhooks/1/t0ken", "https://discord.com/api/***"),
        ("https://${SLACK_HOST}/services/T0/B0/XYZ", "https://hooks.slack.com/services/***"),
    ],
)
def test_what_shows_of_a_webhook_url_the_file_writes(written: str, shown: str) -> None:
    """The file's text shows, each reference as written; passwords, a user alone (a token),
    query values and fragments are masked; so is the path of a service whose URL is the
    credential (Slack, Teams, Discord), wherever its host came from."""
    env = {"PW": "pw", "KEY": "k3y", "BASE": "https://h.example", "HOST": "alerts.example.com"}
    receiver = configured_webhook(written, {**env, "SLACK_HOST": "hooks.slack.com"})
    assert receiver.describe() == f"webhook.team (Alertmanager webhook {shown}, bearer token ***)"


# ---- PagerDuty --------------------------------------------------------------------------------


def test_pagerduty_trigger_is_a_valid_events_v2_event(store: Store, pd: PagerDutyStandIn) -> None:
    """A firing alert is one trigger with the episode's dedup key, our summary, severity and link."""
    run(store, settings_with_link(), 0, {"recall_coverage": Status.BREACHED}, pd=pagerduty(pd))
    [event] = pd.events()
    assert event["routing_key"] == ROUTING_KEY
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == alert_key(SOURCE, "recall_coverage", T0)
    payload = event["payload"]
    assert payload["summary"].startswith(f"recall_coverage breached ({SOURCE}): ")
    assert payload["source"] == SOURCE
    assert payload["severity"] == "critical"
    assert payload["timestamp"] == "2026-11-28T04:00:00Z"
    assert payload["component"] == "recall_coverage"
    assert payload["custom_details"]["sessions"] == ["s-1", "s-2", "s-3"]
    assert event["links"] == [
        {"href": f"{BASE_URL}/reports/20261128T040000Z", "text": "The window's report"}
    ]


def test_pagerduty_resolve_closes_the_incident_its_trigger_opened(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """Trigger, reminder and resolve share the dedup key; the resolve closes the incident."""
    settings = make_settings({"alerts": {"repeat_interval": "4h"}})
    receiver = pagerduty(pd)
    run(store, settings, 0, {"recall_coverage": Status.BREACHED}, pd=receiver)
    run(store, settings, 4, {"recall_coverage": Status.BREACHED}, pd=receiver)
    run(store, settings, 8, {"recall_coverage": Status.OK}, pd=receiver)
    actions = [(e["event_action"], e["dedup_key"]) for e in pd.events()]
    key = alert_key(SOURCE, "recall_coverage", T0)
    assert actions == [("trigger", key), ("trigger", key), ("resolve", key)]
    assert pd.incidents() == {key: "resolved"}


def test_pagerduty_a_new_firing_episode_is_a_new_incident(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """Firing again after a resolve opens a new incident (a new dedup key); the old stays closed."""
    settings = make_settings()
    receiver = pagerduty(pd)
    for hours, status in ((0, Status.BREACHED), (4, Status.OK), (8, Status.BREACHED)):
        run(store, settings, hours, {"recall_coverage": status}, pd=receiver)
    first, second = (
        alert_key(SOURCE, "recall_coverage", T0),
        alert_key(SOURCE, "recall_coverage", T0 + 8 * H),
    )
    assert pd.incidents() == {first: "resolved", second: "triggered"}


def test_pagerduty_gets_one_outbox_row_and_one_event_per_alert(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """Two alerts of one evaluation are two rows and two events, each with its own dedup key."""
    outcome = run(
        store,
        make_settings(),
        0,
        {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED},
        pd=pagerduty(pd),
    )
    assert len(outcome.enqueued) == 2 and len(outcome.delivery.delivered) == 2
    assert [e["payload"]["component"] for e in pd.events()] == [
        "recall_coverage",
        "recall_latency_p95",
    ]
    assert [e["payload"]["severity"] for e in pd.events()] == ["critical", "warning"]


def test_pagerduty_invalid_event_is_set_aside_and_does_not_block_the_next(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """A 400 invalid event rejects that one row; the alert after it is still delivered."""
    settings = make_settings()
    receiver = pagerduty(pd)
    pd.reply(BAD_REQUEST)
    first = run(store, settings, 0, {"recall_coverage": Status.BREACHED}, pd=receiver)
    assert first.delivery.rejected == 1 and "set aside" in first.errors[0]
    second = run(store, settings, 4, {"recall_coverage": Status.OK}, pd=receiver)
    assert second.delivery.delivered == second.enqueued


def test_pagerduty_invalid_routing_key_is_permanent_and_keeps_the_events(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """PagerDuty refusing the routing key keeps every event pending, one request per run."""
    settings = make_settings()
    wrong = pagerduty(pd, routing_key="too-short")
    first = run(store, settings, 0, {"recall_coverage": Status.BREACHED}, pd=wrong)
    second = run(store, settings, 4, {"recall_coverage": Status.OK}, pd=wrong)
    assert len(pd.requests) == 2  # one per run, never a retry storm
    assert second.delivery.pending == 2 and first.delivery.delivered == ()
    assert "check alerts.pagerduty.oncall.routing_key" in second.errors[0]
    assert "too-short" not in " ".join(second.errors)
    right = run(store, settings, 8, {"recall_coverage": Status.BREACHED}, pd=pagerduty(pd))
    assert [e["event_action"] for e in pd.events()] == ["trigger", "resolve", "trigger"]
    assert right.delivery.pending == 0


def test_pagerduty_rate_limit_waits_for_a_later_run_and_keeps_the_order(
    store: Store, pd: PagerDutyStandIn
) -> None:
    """A 429 beyond the deadline leaves the trigger pending; its resolve never overtakes it."""
    settings = make_settings()
    pd.reply(rate_limited(600))
    first = run(store, settings, 0, {"recall_coverage": Status.BREACHED}, pd=pagerduty(pd))
    assert first.delivery.pending == 1
    later = run(store, settings, 4, {"recall_coverage": Status.OK}, pd=pagerduty(pd))
    assert len(later.delivery.delivered) == 2
    assert [e["event_action"] for e in pd.events()] == ["trigger", "resolve"]


def test_a_missing_pagerduty_secret_keeps_its_rows_per_alert_and_pending(store: Store) -> None:
    """PAGERDUTY_KEY unset: the receiver cannot send, its events wait one row per alert."""
    settings = make_settings(
        {"alerts": {"pagerduty": {"oncall": {"routing_key": "${PAGERDUTY_KEY}"}}}}
    )
    [missing] = settings.alerts.missing_secrets()
    assert missing.key == "alerts.pagerduty.oncall.routing_key"
    assert missing.variable == "PAGERDUTY_KEY"
    at = T0
    outcome = process(
        store,
        settings,
        report(at, {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED}),
        now=at,
        timer=FakeTimer(),
    )
    assert outcome.delivery.pending == 2
    assert "PAGERDUTY_KEY is not set" in outcome.errors[0]


def test_notify_test_sends_through_every_receiver_kind(
    hook: WebhookStandIn, pd: PagerDutyStandIn, tmp_path: Path
) -> None:
    """notify-test: machine receivers get a test alert that fires and resolves, Telegram a text."""
    with AlertmanagerStandIn() as am, TelegramStandIn() as tg:
        config = tmp_path / "watchdog.toml"
        config.write_text(
            f'[alerts.webhook.team]\nurl = "{hook.url}"\n'
            f'[alerts.pagerduty.oncall]\nrouting_key = "{ROUTING_KEY}"\nurl = "{pd.url}"\n'
            f'[alerts.alertmanager.prod]\nurl = "{am.url}"\n'
            f'[alerts.telegram.ops]\nbot_token = "{BOT_TOKEN}"\nchat_id = {CHAT_ID}\n'
            f'api_url = "{tg.api_url}"\n',
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
        result = subprocess.run(
            [str(BIN), "notify-test", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count("sent (fired and resolved)") == 3
        assert [d["alerts"][0]["status"] for d in hook.documents()] == ["firing", "resolved"]
        assert hook.documents()[0]["alerts"][0]["labels"]["severity"] == "info"
        assert list(pd.incidents().values()) == ["resolved"]
        fired, resolved = am.alerts()
        assert fired["labels"]["alertname"] == resolved["labels"]["alertname"] == "notify_test"
        assert parse_time(resolved["endsAt"]) <= datetime.now(UTC)  # over at once
        [text] = tg.messages()
        assert text.startswith("memory-watchdog test message")
        assert "telegram.ops (Telegram bot 123456789:***" in result.stdout
        shown = result.stdout + result.stderr
        assert ROUTING_KEY not in shown and BOT_TOKEN.split(":")[1] not in shown
