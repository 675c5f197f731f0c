"""The notifiers: Slack (incoming webhook, or bot token and channel) and stdout.

`NOTIFIERS` is the explicit registry (config key -> factory); the config
model accepts exactly these keys under `[alerts]`, so an unknown notifier
fails when the config loads. Each configured notifier has its own outbox
rows.

Slack goes through slack-sdk: `WebhookClient(url).send(...)` or
`WebClient(token, base_url).chat_postMessage(channel, blocks, text)`, with
slack-sdk's retry handlers (rate limits honouring Retry-After, 5xx,
connection errors and timeouts) bounded by the run's `Deadline` and pacing
their waits through it. Failures are classified: a bad token or a missing
channel is permanent for the notifier, a malformed message is rejected
(after one text-only retry), anything else is transient. Secrets never
appear in an error, a description or a log line.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from http.client import HTTPException, RemoteDisconnected
from typing import Any, TextIO, cast
from urllib.error import URLError
from urllib.parse import urlsplit

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.jitter import Jitter

from alerts.base import Deadline, DeliveryError, Failure, Message, Notifier
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import Settings, SlackSettings, StdoutSettings
from watchdog.core.settings.values import MissingSecret, secret_value

log = logging.getLogger(__name__)


# --- secrets ---------------------------------------------------------------------------------


def mask_webhook(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/XYZ` -> `https://hooks.slack.com/services/***`."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if parts.port:
        host = f"{host}:{parts.port}"
    first = parts.path.strip("/").split("/")[0] if parts.path.strip("/") else ""
    return f"{parts.scheme}://{host}/{first + '/' if first else ''}***"


def mask_token(token: str) -> str:
    """`xoxb-123-abc` -> `xoxb-***`."""
    prefix = token.split("-", 1)[0] if "-" in token else ""
    return f"{prefix}-***" if prefix and len(prefix) <= 5 else "***"


def mask_secrets(text: str, secrets: Iterable[tuple[str, str]]) -> str:
    """`text` with every (secret, masked) pair replaced, longest secret first."""
    for secret, masked in sorted(secrets, key=lambda pair: -len(pair[0])):
        if secret:
            text = text.replace(secret, masked)
    return text


class SecretFilter(logging.Filter):
    """Masks secrets in every record of the logger it is attached to (slack-sdk's)."""

    def __init__(self, secrets: list[tuple[str, str]]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_secrets(record.getMessage(), self.secrets)
        record.args = None
        return True


def _secret_filter(logger: logging.Logger) -> SecretFilter:
    """The logger's SecretFilter, added on first use; loggers are shared, so secrets accumulate."""
    for existing in logger.filters:
        if isinstance(existing, SecretFilter):
            return existing
    added = SecretFilter([])
    logger.addFilter(added)
    return added


# --- retry handlers bounded by the run's deadline ---------------------------------------------


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds from a Retry-After header (slack-sdk hands values as lists or strings)."""
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) and value else value
            try:
                return max(0.0, float(str(raw)))
            except ValueError:
                return None
    return None


class _ProportionalJitter(Jitter):
    """Up to half the interval again, so small test bases stay small."""

    def recalculate(self, duration: float) -> float:
        return float(duration + random.uniform(0, duration / 2))


class RateLimitRetry(RateLimitErrorRetryHandler):
    """429: wait exactly Retry-After when the deadline leaves room for it, else give up."""

    def __init__(self, deadline: Deadline, max_retry_count: int) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        if response is None or response.status_code != 429:
            return False
        wait = retry_after(response.headers)
        return self.deadline.allows(1.0 if wait is None else wait)

    def prepare_for_next_attempt(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> None:
        state.next_attempt_requested = True
        wait = retry_after(response.headers if response is not None else None)
        self.deadline.sleep(1.0 if wait is None else wait)
        state.increment_current_attempt()


class _Backoff:
    """Exponential backoff with jitter, paced through the deadline."""

    deadline: Deadline
    interval_calculator: Any

    def _wait(self, state: Any) -> float:
        return float(self.interval_calculator.calculate_sleep_duration(state.current_attempt))

    def prepare_for_next_attempt(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> None:
        state.next_attempt_requested = True
        self.deadline.sleep(self._wait(state))
        state.increment_current_attempt()


class ServerErrorRetry(_Backoff, ServerErrorRetryHandler):
    """Any 5xx, with backoff, while the deadline allows."""

    def __init__(self, deadline: Deadline, max_retry_count: int, backoff_base: float) -> None:
        ServerErrorRetryHandler.__init__(
            self,
            max_retry_count=max_retry_count,
            interval_calculator=BackoffRetryIntervalCalculator(
                backoff_factor=backoff_base, jitter=_ProportionalJitter()
            ),
        )
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        return (
            response is not None
            and response.status_code >= 500
            and self.deadline.allows(backoff_bound(self.interval_calculator, state))
        )


class ConnectionRetry(_Backoff, ConnectionErrorRetryHandler):
    """Refused, reset, dropped or timed-out connections, with backoff, while the deadline allows."""

    def __init__(self, deadline: Deadline, max_retry_count: int, backoff_base: float) -> None:
        ConnectionErrorRetryHandler.__init__(
            self,
            max_retry_count=max_retry_count,
            interval_calculator=BackoffRetryIntervalCalculator(
                backoff_factor=backoff_base, jitter=_ProportionalJitter()
            ),
            error_types=[
                URLError,
                ConnectionError,
                RemoteDisconnected,
                TimeoutError,
                HTTPException,
            ],
        )
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        return bool(
            super()._can_retry(state=state, request=request, response=response, error=error)
        ) and self.deadline.allows(backoff_bound(self.interval_calculator, state))


def backoff_bound(calculator: Any, state: Any) -> float:
    """The longest the next backoff may take (base * 2^attempt, plus half for jitter)."""
    return float(calculator.backoff_factor * (2**state.current_attempt) * 1.5)


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


def describe_exception(exc: BaseException) -> str:
    """One line for a transport error (no URL in it: urllib's messages carry none)."""
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    if isinstance(exc, URLError):
        return f"connection failed: {exc.reason}"
    return f"{type(exc).__name__}: {exc}".strip()


class SlackNotifier:
    """Slack through slack-sdk: an incoming webhook, or a bot token and a channel."""

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
            self._secrets.append((webhook_url, mask_webhook(webhook_url)))
            self._secrets.append((urlsplit(webhook_url).path, "/***"))
        if token:
            self._secrets.append((token, mask_token(token)))
        # slack-sdk logs request URLs at debug level: mask them on the logger it is given.
        self._logger = logging.getLogger(f"slack_sdk.memory_watchdog.{name}")
        _secret_filter(self._logger).secrets.extend(self._secrets)

    @classmethod
    def from_settings(cls, settings: SlackSettings) -> SlackNotifier:
        return cls(
            webhook_url=secret_value(settings.webhook_url) or None,
            token=secret_value(settings.token) or None,
            channel=settings.channel,
            base_url=settings.base_url,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
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
                if response.status_code == 200:
                    return
                raise classify(
                    self.name, response.status_code, str(response.body), response.headers
                )
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


# --- stdout ----------------------------------------------------------------------------------


class StdoutNotifier:
    """The message as plain text on a stream (stdout by default) or appended to a file.

    For cron mail and debugging. Commands whose stdout is a report (`check`)
    hand in stderr, so the report stays clean.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        file: str | None = None,
        quiet_hours: QuietHours | None = None,
        name: str = "stdout",
    ) -> None:
        self.name = name
        self.stream = stream
        self.file = file
        self.quiet_hours = quiet_hours

    @classmethod
    def from_settings(
        cls, settings: StdoutSettings, stream: TextIO | None = None
    ) -> StdoutNotifier:
        return cls(stream, file=settings.file, quiet_hours=settings.quiet_hours)

    def describe(self) -> str:
        if self.file:
            return f"{self.name} (plain text appended to {self.file})"
        where = "standard error" if self.stream is sys.stderr else "standard output"
        return f"{self.name} (plain text on {where})"

    def send(self, message: Message, deadline: Deadline) -> None:
        text = message.plain.rstrip("\n") + "\n"
        try:
            if self.file:
                with open(self.file, "a", encoding="utf-8") as out:
                    out.write(text)
                return
            stream = self.stream or sys.stdout
            stream.write(text)
            stream.flush()
        except OSError as exc:
            raise DeliveryError(self.name, f"cannot write: {exc.strerror}") from None


# --- a notifier whose secret is not set ---------------------------------------------------


class UnavailableNotifier:
    """A configured notifier that cannot send: a secret it needs is not set in the environment.

    Its messages are enqueued like any other's and stay pending (a permanent
    error, one line per run), so nothing is lost: they go out once the
    secret is set.
    """

    def __init__(self, name: str, problem: str, quiet_hours: QuietHours | None = None) -> None:
        self.name = name
        self.problem = problem
        self.quiet_hours = quiet_hours

    def describe(self) -> str:
        return f"{self.name} (cannot send: {self.problem})"

    def send(self, message: Message, deadline: Deadline) -> None:
        raise DeliveryError(
            self.name,
            f"{self.problem} (set it where the watchdog runs, e.g. the service's EnvironmentFile)",
            failure=Failure.PERMANENT,
        )


# --- the registry ----------------------------------------------------------------------------


def _slack(settings: Settings, text_stream: TextIO | None = None) -> Notifier | None:
    slack = settings.alerts.slack
    if slack is None:
        return None
    missing = [s for s in (slack.webhook_url, slack.token) if isinstance(s, MissingSecret)]
    if missing:
        return UnavailableNotifier("slack", missing[0].problem, slack.quiet_hours)
    return SlackNotifier.from_settings(slack)


def _stdout(settings: Settings, text_stream: TextIO | None) -> Notifier | None:
    cfg = settings.alerts.stdout
    if cfg is None or not cfg.enabled:
        return None
    return StdoutNotifier.from_settings(cfg, text_stream)


# `[alerts.<name>]` -> the notifier it configures (None when absent or disabled).
NOTIFIERS: dict[str, Callable[[Settings, TextIO | None], Notifier | None]] = {
    "slack": _slack,
    "stdout": _stdout,
}


def build_notifiers(
    settings: Settings, *, text_stream: TextIO | None = None
) -> dict[str, Notifier]:
    """Every notifier the config turns on, by name.

    `text_stream` is where the stdout notifier writes (default stdout); `check`
    hands in stderr because its report owns stdout.
    """
    built = {name: factory(settings, text_stream) for name, factory in NOTIFIERS.items()}
    return {name: notifier for name, notifier in built.items() if notifier is not None}
