"""Telegram through the Bot API's `sendMessage` in HTML: every value escaped for Telegram's
HTML subset, at most 4,096 characters as Telegram counts them, `parameters.retry_after`
honoured, the bot token (in the URL path) masked everywhere (docs/alerts.md#telegram)."""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import field_validator

from alerts.base import (
    AlertFacts,
    Deadline,
    DeliveryError,
    Failure,
    Message,
    Receiver,
    ReceiverContext,
)
from alerts.receivers.http import (
    Answer,
    JsonPost,
    classify_status,
    not_the_service,
    retry_after,
)
from alerts.render import format_window
from checks.base import Window
from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.receivers import ReceiverModel, check_http_url, positive
from watchdog.core.settings.values import Secret, mask_secrets, secret_value
from watchdog.core.text import printable
from watchdog.core.times import parse_time

log = logging.getLogger(__name__)

TELEGRAM_API_URL = "https://api.telegram.org"
TEST_CAUSE = "test"  # the cause of notify-test's alert (alerts.facts.notify_test_facts)
MAX_TEXT = 4096  # characters after entities are parsed, in UTF-16 code units
MAX_FIELD = 600  # one value (a summary, an id) shown in a message

_ICONS = {"fire": "\U0001f534", "repeat": "\U0001f7e0", "refresh": "\U0001f7e0"}
_RESOLVED, _ERROR, _NO_DATA = "\U0001f7e2", "\u26a0\ufe0f", "\u2754"


def utf16_length(text: str) -> int:
    """The length Telegram counts: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _text(value: object, limit: int = MAX_FIELD) -> str:
    """A value as HTML text: printable (controls escaped), cut, then escaped."""
    return html.escape(printable(value, limit), quote=False)


def _label(alert: AlertFacts) -> tuple[str, str]:
    if not alert.firing:
        return _RESOLVED, "RESOLVED"
    if alert.kind in ("repeat", "refresh"):
        label = "STILL FIRING"
    else:
        label = {"error": "ERROR", "no_data": "NO DATA"}.get(alert.cause, "FIRING")
    icon = {"error": _ERROR, "no_data": _NO_DATA}.get(alert.cause, _ICONS.get(alert.kind, ""))
    return icon, label


def alert_html(alert: AlertFacts) -> tuple[str, str]:
    """One alert as (HTML, the text Telegram shows of it)."""
    icon, label = _label(alert)
    parts = [
        f"{icon} <b>{label}</b> <code>{_text(alert.check_id, 100)}</code>"
        f" [{_text(alert.severity, 20)}]: {_text(alert.headline)}."
    ]
    if alert.firing:
        parts.append(f" {_text(alert.summary)}.")
        if alert.target not in ("", "—"):
            parts.append(f" Value {_text(alert.value, 60)}, breach when {_text(alert.target, 60)}.")
        if alert.evidence:
            ids = ", ".join(f"<code>{_text(i, 100)}</code>" for i in alert.evidence)
            more = f" and {alert.evidence_more} more" if alert.evidence_more else ""
            noun = (alert.evidence_kind or "evidence").capitalize()
            parts.append(f" {_text(noun, 20)}: {ids}{more}.")
    text = "".join(parts)
    return text, _shown(text)


def _shown(markup: str) -> str:
    """What Telegram shows of our own markup: the tags gone, the entities decoded."""
    plain = markup
    for tag in ("<b>", "</b>", "<code>", "</code>"):
        plain = plain.replace(tag, "")
    if "<a href=" in plain:
        plain = plain[: plain.index("<a href=")] + plain[plain.index('">') + 2 :]
        plain = plain.replace("</a>", "")
    return html.unescape(plain)


def telegram_html(alerts: Sequence[AlertFacts], link: str = "") -> str:
    """The message's text: a title, one paragraph per alert, the report's link; at most
    MAX_TEXT characters as Telegram counts them, alerts that do not fit cut with a count."""
    firing = sum(1 for a in alerts if a.firing)
    counts = [f"{firing} firing"] if firing else []
    counts += [f"{len(alerts) - firing} resolved"] if len(alerts) > firing else []
    first = alerts[0]
    title = (
        f"<b>memory-watchdog: {', '.join(counts)}</b> ({_text(first.source, 200)},"
        f" window {_text(_window(first), 60)})"
    )
    report = (
        f'\n\n<a href="{html.escape(link, quote=True)}">The window\'s report</a>' if link else ""
    )
    blocks = [alert_html(a) for a in alerts]
    budget = MAX_TEXT - utf16_length(_shown(title)) - utf16_length(_shown(report))
    shown: list[str] = []
    for index, (markup, text) in enumerate(blocks):
        left = len(blocks) - index - 1
        tail = f"\n\n… ({left} more in the report)" if left else ""
        cost = utf16_length("\n\n" + text)
        reserve = utf16_length(tail) if left else 0
        if cost + reserve > budget:
            tail = f"\n\n… ({len(blocks) - index} more in the report)"
            return title + "".join(shown) + tail + report
        shown.append("\n\n" + markup)
        budget -= cost
    return title + "".join(shown) + report


def _window(alert: AlertFacts) -> str:
    """The alert's window as chat shows it (`2026-11-28 00:00 – 04:00 UTC`)."""
    try:
        start, end = parse_time(alert.window_start), parse_time(alert.window_end)
    except ValueError:
        return f"{alert.window_start} – {alert.window_end}"
    return format_window(Window(at=end, length=end - start, lookback=end - start))


class TelegramSettings(ReceiverModel):
    """`[alerts.telegram.<name>]`: a Telegram chat through the Bot API's `sendMessage`.

    `bot_token` is a secret (it sits in the request's URL path); `chat_id` is a
    chat's number (`-1001234567890`) or a public channel's `@name`. `api_url`
    is the Bot API server (change it only for a local Bot API server or a test).
    """

    kind: ClassVar[str] = "telegram"
    title: ClassVar[str] = "Telegram"

    bot_token: Secret
    chat_id: str
    api_url: str = TELEGRAM_API_URL
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    _timeout = field_validator("timeout")(positive)

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and not re.fullmatch(
            r"-?\d{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31}", value
        ):
            raise ValueError(
                f"{value!r} is not a chat id (a number such as -1001234567890, or @channelname)"
            )
        return value

    @field_validator("api_url")
    @classmethod
    def _http(cls, value: str) -> str:
        check_http_url(value, secret=False)
        return value

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: Secret) -> Secret:
        token = secret_value(value)
        if token and not re.fullmatch(r"\d{1,20}:[A-Za-z0-9_-]{20,100}", token):
            raise ValueError(
                "is not a bot token (digits, a colon, then the secret: as @BotFather gives it;"
                " value not shown)"
            )
        return value


class TelegramNotifier:
    """Telegram's Bot API `sendMessage`, in HTML, to one chat."""

    per_alert: ClassVar[bool] = False

    def __init__(
        self,
        *,
        bot_token: str,
        chat_id: str,
        api_url: str = TELEGRAM_API_URL,
        timeout_s: float = 10.0,
        quiet_hours: QuietHours | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        name: str = "telegram",
    ) -> None:
        self.name = name
        self.chat_id = chat_id
        self.api_url = api_url.rstrip("/")
        self.quiet_hours = quiet_hours
        bot_id = bot_token.split(":", 1)[0]
        self.shown_token = f"{bot_id}:***" if ":" in bot_token else "***"
        self._secrets = [(bot_token, self.shown_token)]
        self.post = JsonPost(
            name=name,
            url=f"{self.api_url}/bot{bot_token}/sendMessage",
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base=backoff_base,
            mask=self.mask,
            wait_of=_asked_wait,
            read_success=True,
        )

    @classmethod
    def from_settings(
        cls, settings: TelegramSettings, *, name: str, context: ReceiverContext | None = None
    ) -> TelegramNotifier:
        return cls(
            bot_token=secret_value(settings.bot_token),
            chat_id=settings.chat_id,
            api_url=settings.api_url,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
            name=name,
        )

    def describe(self) -> str:
        return f"{self.name} (Telegram bot {self.shown_token}, chat {self.chat_id})"

    def mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    def send(self, message: Message, deadline: Deadline) -> None:
        """The message in HTML; if Telegram cannot parse it, once more as plain text."""
        if message.alerts and not any(a.cause == TEST_CAUSE for a in message.alerts):
            link = next((a.link for a in message.alerts if a.link), "")
            text = telegram_html(message.alerts, link)
        else:  # notify-test's message (its own template), or one without facts
            text = html.escape(_cut(message.plain), quote=False)
        try:
            self._send({"text": text, "parse_mode": "HTML"}, deadline)
        except DeliveryError as exc:
            if exc.failure is not Failure.REJECTED:
                raise
            log.info("%s: %s; sending it as plain text", self.name, exc.problem)
            self._send({"text": _cut(message.plain)}, deadline)

    def _send(self, fields: dict[str, Any], deadline: Deadline) -> None:
        body = {
            "chat_id": self.chat_id,
            **fields,
            "link_preview_options": {"is_disabled": True},
        }
        self.post.send(body, deadline, self._classify)

    def _classify(self, answer: Answer) -> DeliveryError | None:
        key = f"alerts.{self.name}"
        if 200 <= answer.status < 300:  # the Bot API says in its body whether it sent it
            found = _answer_json(answer)
            if found.get("ok") is True:
                return None
            code = found.get("error_code")
            if found.get("ok") is False and isinstance(code, int) and not 200 <= code < 300:
                return self._classify(replace(answer, status=code))  # its error, as it says it
            return not_the_service(
                self.name,
                answer,
                service="Telegram",
                says='{"ok": true}',
                url_key=f"{key}.api_url",
            )
        description = _description(answer)
        shown = f"HTTP {answer.status}: {description}" if description else f"HTTP {answer.status}"
        lowered = description.lower()
        if answer.status == 429:
            wait = _asked_wait(answer)
            return DeliveryError(
                self.name,
                f"rate limited ({shown})",
                retry_after=wait if wait is not None else 60.0,
            )
        if answer.status >= 500 or answer.status == 408:
            return DeliveryError(self.name, f"Telegram answered {shown}")
        if answer.status in (401, 404):
            return DeliveryError(
                self.name, f"{shown}: check {key}.bot_token", failure=Failure.PERMANENT
            )
        if answer.status == 403 or "chat not found" in lowered or "upgraded" in lowered:
            return DeliveryError(
                self.name,
                f"{shown}: check {key}.chat_id (and that the bot is a member of the chat)",
                failure=Failure.PERMANENT,
            )
        if answer.status == 400:
            return DeliveryError(
                self.name, f"Telegram refused the message: {shown}", failure=Failure.REJECTED
            )
        return classify_status(
            self.name, answer, service="Telegram", key=f"{key}.bot_token", url_key=f"{key}.api_url"
        )


def _cut(text: str) -> str:
    """Plain text within MAX_TEXT (a last resort: a message Telegram could not parse)."""
    if utf16_length(text) <= MAX_TEXT:
        return text
    tail = "\n… (more in the report)"
    kept = text.encode("utf-16-le")[: 2 * (MAX_TEXT - len(tail))]
    return kept.decode("utf-16-le", errors="ignore") + tail


def _answer_json(answer: Answer) -> dict[str, Any]:
    try:
        found = json.loads(answer.body)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _description(answer: Answer) -> str:
    """Telegram's own words for a refusal (`Bad Request: chat not found`)."""
    description = _answer_json(answer).get("description")
    return printable(description, 200) if isinstance(description, str) else answer.line()


def _asked_wait(answer: Answer) -> float | None:
    """`parameters.retry_after` of a 429's body (Telegram's way), else its Retry-After."""
    parameters = _answer_json(answer).get("parameters")
    if isinstance(parameters, dict):
        wait = parameters.get("retry_after")
        if isinstance(wait, int | float) and not isinstance(wait, bool):
            return retry_after({"Retry-After": str(wait)})
    return retry_after(answer.headers)


RECEIVER = Receiver(model=TelegramSettings, notifier=TelegramNotifier)
