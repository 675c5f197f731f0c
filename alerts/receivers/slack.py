"""Slack through slack-sdk: an incoming webhook, or a bot token and a channel.

`WebhookClient(url).send(...)` or `WebClient(token, base_url).chat_postMessage(
channel, blocks, text)`, with slack-sdk's retry handlers (rate limits
honouring Retry-After, 5xx, connection errors and timeouts) bounded by the
run's `Deadline` and pacing their waits through it, by the same rules as
`alerts.receivers.http`. Failures are classified: a bad token or a missing
channel is permanent for the receiver, a malformed message is rejected
(after one text-only retry), anything else is transient. Secrets never
appear in an error, a description or a log line (docs/alerts.md#configure-slack).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar, cast

from pydantic import model_validator

from alerts.base import Deadline, DeliveryError, Failure, Message, Receiver, ReceiverContext
from alerts.receivers.http import describe_exception, retry_after
from alerts.receivers.secrets import (
    mask_token,
    mask_webhook,
    secret_filter,
    url_secrets,
)
from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.receivers import ReceiverModel, check_http_url
from watchdog.core.settings.values import MissingSecret, Secret, mask_secrets, secret_value

log = logging.getLogger(__name__)


# --- Slack -----------------------------------------------------------------------------------

# Errors after which no message can get through until someone fixes the config.
PERMANENT = {
    "invalid_auth": "check alerts.slack.token",
    "not_authed": "check alerts.slack.token",
    "account_inactive": "the token's user or bot was deactivated",
    "token_revoked": "check alerts.slack.token (revoked)",
    "token_expired": "check alerts.slack.token (expired)",
    "no_permission": "the token lacks chat:write",
    "missing_scope": "the token lacks chat:write",
    "not_allowed_token_type": "use a bot token (xoxb-)",
    "channel_not_found": "check alerts.slack.channel (and invite the app to it)",
    "not_in_channel": "invite the app to alerts.slack.channel",
    "is_archived": "alerts.slack.channel is archived",
    "restricted_action": "the workspace does not allow this app to post there",
    "team_access_not_granted": "the token has no access to this workspace",
    "ekm_access_denied": "the workspace's key management denied access",
    "access_denied": "check alerts.slack.token",
    # Incoming webhooks answer with these bodies.
    "invalid_token": "check alerts.slack.webhook_url (revoked or wrong)",
    "no_service": "check alerts.slack.webhook_url (the webhook was removed)",
    "no_service_id": "check alerts.slack.webhook_url",
    "no_team": "check alerts.slack.webhook_url",
    "team_disabled": "the workspace is disabled",
    "action_prohibited": "an admin restricted posting to this channel",
    "channel_is_archived": "the webhook's channel is archived",
    "posting_to_general_channel_denied": "the app may not post to #general",
}

# Errors about one message: it can never be delivered as it is.
REJECTED = {
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_payload",
    "invalid_arguments",
    "invalid_json",
    "json_not_object",
    "msg_too_long",
    "no_text",
    "too_many_attachments",
    "too_many_blocks",
}


def classify(
    notifier: str, status: int | None, error: str, headers: Mapping[str, Any] | None
) -> DeliveryError:
    """A failed Slack answer as a DeliveryError: permanent, rejected, or transient."""
    code = (error or "").strip().split()[0] if (error or "").strip() else ""
    shown = f"{code} (HTTP {status})" if status else code or "no answer"
    if code in PERMANENT or (status in (401, 403, 404, 410) and code not in REJECTED):
        hint = PERMANENT.get(code, "check alerts.slack (the credentials or the channel)")
        return DeliveryError(notifier, f"{shown}: {hint}", failure=Failure.PERMANENT)
    if code in REJECTED or status == 400:
        return DeliveryError(
            notifier, f"Slack rejected the message: {shown}", failure=Failure.REJECTED
        )
    if status == 429 or code in ("ratelimited", "rate_limited"):
        wait = retry_after(headers)
        after = f"; Retry-After {wait:g}s" if wait is not None else ""
        return DeliveryError(
            notifier,
            f"rate limited (HTTP 429{after})",
            retry_after=wait if wait is not None else 60.0,
        )
    return DeliveryError(notifier, f"Slack answered {shown}")


class SlackSettings(ReceiverModel):
    """`[alerts.slack]`: an incoming webhook, or a bot token and a channel.

    `webhook_url` and `token` are secrets: pydantic's SecretStr keeps them out
    of every repr, dump and log line; only the receiver reads their value.
    """

    kind: ClassVar[str] = "slack"
    named: ClassVar[bool] = False
    title: ClassVar[str] = "Slack"

    webhook_url: Secret | None = None
    token: Secret | None = None
    channel: str | None = None
    base_url: str | None = None  # Slack's API root; for tests and proxies
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSettings:
        webhook, token = secret_value(self.webhook_url), secret_value(self.token)
        has_webhook = bool(webhook) or isinstance(self.webhook_url, MissingSecret)
        has_token = bool(token) or isinstance(self.token, MissingSecret)
        if has_webhook == has_token:
            raise ValueError("set webhook_url, or token and channel (exactly one mode)")
        if webhook:
            try:
                check_http_url(webhook, secret=True)
            except ValueError as exc:
                raise ValueError(f"webhook_url is {exc}") from None
        if has_token and not self.channel:
            raise ValueError('token needs channel (e.g. channel = "#memory-alerts")')
        if self.base_url is not None:
            check_http_url(self.base_url, secret=False)
        if self.timeout <= timedelta(0):
            raise ValueError("timeout must be positive")
        return self


class SlackNotifier:
    """Slack through slack-sdk: an incoming webhook, or a bot token and a channel."""

    per_alert: ClassVar[bool] = False

    def __init__(
        self,
        *,
        webhook_url: str | None = None,
        token: str | None = None,
        channel: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 10.0,
        quiet_hours: QuietHours | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        name: str = "slack",
    ) -> None:
        if bool(webhook_url) == bool(token):
            raise ValueError("a Slack notifier needs webhook_url, or token and channel")
        self.name = name
        self.webhook_url = webhook_url
        self.token = token
        self.channel = channel
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.quiet_hours = quiet_hours
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self._secrets: list[tuple[str, str]] = []
        if webhook_url:
            self._secrets += url_secrets(webhook_url)
        if token:
            self._secrets.append((token, mask_token(token)))
        # slack-sdk logs request URLs at debug level: mask them on the logger it is given.
        self._logger = logging.getLogger(f"slack_sdk.memory_watchdog.{name}")
        secret_filter(self._logger).secrets.extend(self._secrets)

    @classmethod
    def from_settings(
        cls, settings: SlackSettings, *, name: str = "slack", context: ReceiverContext | None = None
    ) -> SlackNotifier:
        return cls(
            webhook_url=secret_value(settings.webhook_url) or None,
            token=secret_value(settings.token) or None,
            channel=settings.channel,
            base_url=settings.base_url,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
            name=name,
        )

    def describe(self) -> str:
        if self.webhook_url:
            return f"{self.name} (incoming webhook {mask_webhook(self.webhook_url)})"
        where = f" via {self.base_url}" if self.base_url else ""
        return (
            f"{self.name} (bot token {mask_token(self.token or '')}, channel {self.channel}{where})"
        )

    def mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    def _handlers(self, deadline: Deadline) -> list[Any]:
        # Deferred with the clients: slack-sdk loads only when a message goes out.
        from alerts.slack_retry import ConnectionRetry, RateLimitRetry, ServerErrorRetry

        return [
            RateLimitRetry(deadline, self.max_retries),
            ServerErrorRetry(deadline, self.max_retries, self.backoff_base),
            ConnectionRetry(deadline, self.max_retries, self.backoff_base),
        ]

    def send(self, message: Message, deadline: Deadline) -> None:
        """Post the message; on a malformed-message error, once more as text only."""
        try:
            self._post(message.text, list(message.blocks), deadline)
        except DeliveryError as exc:
            if exc.failure is not Failure.REJECTED or not message.blocks:
                raise
            log.info("%s: %s; sending the text fallback alone", self.name, exc.problem)
            self._post(message.text, None, deadline)

    def _post(self, text: str, blocks: list[Any] | None, deadline: Deadline) -> None:
        # Deferred: slack_sdk's clients are only needed when a message goes out.
        from slack_sdk.errors import SlackApiError
        from slack_sdk.web import WebClient
        from slack_sdk.webhook import WebhookClient

        if deadline.expired():
            raise DeliveryError(self.name, "no time left in alerts.delivery_timeout")
        timeout = max(0.05, min(self.timeout_s, deadline.remaining()))
        handlers = self._handlers(deadline)
        try:
            if self.webhook_url:
                client = WebhookClient(
                    self.webhook_url,
                    timeout=cast(int, timeout),  # urllib takes float seconds; the stub says int
                    retry_handlers=handlers,
                    logger=self._logger,
                )
                response = client.send(
                    text=text, blocks=blocks, unfurl_links=False, unfurl_media=False
                )
                body = str(response.body).strip()
                if response.status_code == 200 and body == "ok":  # what Slack answers
                    return
                code = body.split()[0] if body else ""
                if 200 <= response.status_code < 300 and (code != body or code in ("", "ok")):
                    raise DeliveryError(  # a page, or nothing: not Slack that answered
                        self.name,
                        f"HTTP {response.status_code} without Slack's answer (the body ok):"
                        " check alerts.slack.webhook_url",
                        failure=Failure.PERMANENT,
                    )
                raise classify(self.name, response.status_code, body, response.headers)
            api = WebClient(
                token=self.token,
                base_url=self.base_url or WebClient.BASE_URL,
                timeout=cast(int, timeout),
                retry_handlers=handlers,
                logger=self._logger,
            )
            api.chat_postMessage(
                channel=self.channel or "",
                text=text,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
            )
        except DeliveryError:
            raise
        except SlackApiError as exc:
            response = exc.response
            raise classify(
                self.name,
                getattr(response, "status_code", None),
                str(response.get("error", "") if response is not None else ""),
                getattr(response, "headers", None),
            ) from None
        except Exception as exc:  # transport: refused, reset, timed out, TLS
            raise DeliveryError(self.name, self.mask(describe_exception(exc))) from None


RECEIVER = Receiver(model=SlackSettings, notifier=SlackNotifier)
