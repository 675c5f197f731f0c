"""What of a webhook receiver's URL shows (what the config file wrote, never what the
environment gave), and how credentials in it are sent: through the real HTTP client, against a
local stand-in (docs/alerts.md#receivers-and-routes)."""

from __future__ import annotations

import base64

import pytest

from alerts.base import DeliveryError, Message
from alerts.notifiers import WebhookNotifier, build_notifiers
from alerts.testing import FakeTimer
from checks.base import Status
from tests.alerts.conftest import make_settings
from tests.alerts.http_standin import (
    BEARER,
    ECHO,
    UNAUTHORIZED,
    WebhookStandIn,
)
from tests.alerts.test_receivers import deadline, firing_message, run
from watchdog.core.store import Store

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
