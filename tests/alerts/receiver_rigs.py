"""One rig per receiver kind: its real receiver against a local stand-in of its service.

The notifier contract suite (tests/alerts/test_receiver_contract.py) runs
every rig through the same tests, as APScheduler runs one suite over every
data store; the rigs must cover every kind of `alerts.notifiers.RECEIVERS`
(the suite checks it), so a new receiver kind is covered once it has a rig.
A new kind brings its rig in a module of its own beside its tests,
`tests/alerts/rig_<kind>.py` defining `rigs()`: found by scanning, no list
here is edited.

A rig builds the real receiver (`make`, with fast retries), the config table
that configures it (`table`), scripts its stand-in's answers in the words
of the contract (`reply("rate_limited", 7)`, `"server_error"`, `"timeout"`,
`"revoked"`: credentials the service refuses, `"malformed"`: a message it
refuses) and says which of its requests were accepted.
"""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import tests.alerts
from alerts.base import Message
from alerts.facts import alert_facts
from alerts.notifiers import (
    AlertmanagerNotifier,
    PagerDutyNotifier,
    SlackNotifier,
    StdoutNotifier,
    TelegramNotifier,
    WebhookNotifier,
)
from alerts.render import sample_notifications, templates
from checks.base import Severity
from tests.alerts import http_standin as http
from tests.alerts import slack_standin as slack
from tests.alerts import telegram_standin as telegram

FAST = {"backoff_base": 0.01, "timeout_s": 2.0}
AM_PASSWORD = "am-s3cr3t-password"


def firing_message() -> Message:
    """One firing alert (recall_coverage, critical) as the outbox hands it to a receiver."""
    fire = sample_notifications()[:1]
    rendered = templates().message(fire)
    return Message(
        id="m-contract",
        text=rendered.text,
        blocks=rendered.blocks,
        plain=rendered.plain,
        severity=Severity.CRITICAL,
        alerts=tuple(alert_facts(n) for n in fire),
    )


@dataclass
class Rig:
    """A receiver kind, its stand-in, and how to script and read it."""

    id: str  # the test id: the kind, and its mode when it has several
    kind: str  # a receiver kind of RECEIVERS
    name: str  # the receiver's name (`webhook.team`)
    http: bool  # spoken over HTTP: the retry, rate-limit and failure contract applies
    secrets: tuple[str, ...]  # what may never show
    start: Callable[[], Any]  # the stand-in
    build: Callable[[Any, dict[str, Any]], Any]  # (stand-in, options) -> the real receiver
    config: Callable[[Any], dict[str, Any]]  # (stand-in) -> its [alerts] tables
    env: dict[str, str] = field(default_factory=dict)  # what the tables' `${NAME}`s read
    replies: dict[str, Callable[..., Any]] = field(default_factory=dict)
    malformed_requests: int = 1  # requests before a malformed message is rejected
    standin: Any = None

    def make(self, **options: Any) -> Any:
        """The real receiver against the stand-in, with fast retries unless told otherwise."""
        return self.build(self.standin, {**FAST, **options})

    def reply(self, kind: str, *args: float) -> None:
        """Answer the next request as the contract names it."""
        self.standin.reply(self.replies[kind](*args))

    def always(self, kind: str, *args: float) -> None:
        """Answer every request from now on so."""
        self.standin.default = self.replies[kind](*args)

    def requests(self) -> list[Any]:
        return list(self.standin.requests)

    def accepted(self) -> list[Any]:
        return list(self.standin.delivered())

    def received(self) -> list[str]:
        """What the service accepted, one text per message (the JSON body, or the text printed)."""
        return [
            r if isinstance(r, str) else json.dumps(r.body, ensure_ascii=False)
            for r in self.accepted()
        ]

    def table(self) -> dict[str, Any]:
        return self.config(self.standin)

    def close(self) -> None:
        self.standin.close()


@dataclass
class _Stream:
    """The stdout receiver's stream, as a stand-in: what it was given to print."""

    stream: io.StringIO = field(default_factory=io.StringIO)
    requests: list[str] = field(default_factory=list)

    def delivered(self) -> list[str]:
        """One entry per message printed (each starts with its title line)."""
        text = self.stream.getvalue()
        return ["memory-watchdog:" + m for m in text.split("memory-watchdog:")[1:]]

    def close(self) -> None:
        self.stream.close()


SLACK_REPLIES = {
    "ok": lambda: slack.OK,
    "rate_limited": slack.rate_limited,
    "server_error": lambda: slack.SERVER_ERROR,
    "timeout": slack.timeout,
    "revoked": lambda: slack.INVALID_AUTH,
    "malformed": lambda: slack.INVALID_BLOCKS,
}

HTTP_REPLIES = {
    "ok": lambda: http.OK,
    "rate_limited": http.rate_limited,
    "server_error": lambda: http.SERVER_ERROR,
    "timeout": http.timeout,
    "revoked": lambda: http.UNAUTHORIZED,
    "malformed": lambda: http.BAD_REQUEST,
}


def _builtin_rigs() -> list[Rig]:
    return [
        Rig(
            id="slack-webhook",
            kind="slack",
            name="slack",
            http=True,
            secrets=(slack.WEBHOOK_PATH, "s3cr3t"),
            start=slack.SlackStandIn,
            build=lambda s, o: SlackNotifier(webhook_url=s.webhook_url, **o),
            config=lambda s: {"slack": {"webhook_url": s.webhook_url}},
            replies=SLACK_REPLIES,
            malformed_requests=2,  # the blocks, then the text fallback alone
        ),
        Rig(
            id="slack-token",
            kind="slack",
            name="slack",
            http=True,
            secrets=(slack.TOKEN, "s3cr3t"),
            start=slack.SlackStandIn,
            build=lambda s, o: SlackNotifier(
                token=slack.TOKEN, channel="#memory-alerts", base_url=s.api_url, **o
            ),
            config=lambda s: {
                "slack": {"token": slack.TOKEN, "channel": "#memory-alerts", "base_url": s.api_url}
            },
            replies=SLACK_REPLIES,
            malformed_requests=2,
        ),
        Rig(
            id="webhook",
            kind="webhook",
            name="webhook.team",
            http=True,
            secrets=(http.WEBHOOK_PATH, "s3cr3t", http.BEARER),
            start=http.WebhookStandIn,
            build=lambda s, o: WebhookNotifier(
                url=s.url, bearer_token=http.BEARER, name="webhook.team", **o
            ),
            # The secret part of the path from the environment, as a token is configured: a
            # path written in the file is shown (tests/alerts/test_receivers.py).
            config=lambda s: {
                "webhook": {
                    "team": {"url": f"{s.base}/hooks/${{HOOK_SECRET}}", "bearer_token": http.BEARER}
                },
            },
            env={"HOOK_SECRET": http.WEBHOOK_PATH.removeprefix("/hooks/")},
            replies=HTTP_REPLIES,
        ),
        Rig(
            id="pagerduty",
            kind="pagerduty",
            name="pagerduty.oncall",
            http=True,
            secrets=(http.ROUTING_KEY,),
            start=http.PagerDutyStandIn,
            build=lambda s, o: PagerDutyNotifier(
                routing_key=http.ROUTING_KEY, url=s.url, name="pagerduty.oncall", **o
            ),
            config=lambda s: {
                "pagerduty": {"oncall": {"routing_key": http.ROUTING_KEY, "url": s.url}}
            },
            replies=HTTP_REPLIES,
        ),
        Rig(
            id="alertmanager",
            kind="alertmanager",
            name="alertmanager.prod",
            http=True,
            secrets=(AM_PASSWORD,),
            start=http.AlertmanagerStandIn,
            build=lambda s, o: AlertmanagerNotifier(
                urls=[s.url], basic_auth=("watchdog", AM_PASSWORD), name="alertmanager.prod", **o
            ),
            config=lambda s: {
                "alertmanager": {
                    "prod": {
                        "url": s.url,
                        "basic_auth_user": "watchdog",
                        "basic_auth_password": AM_PASSWORD,
                    }
                }
            },
            replies=HTTP_REPLIES,
        ),
        Rig(
            id="telegram",
            kind="telegram",
            name="telegram.ops",
            http=True,
            secrets=(telegram.BOT_TOKEN, telegram.BOT_TOKEN.split(":")[1]),
            start=telegram.TelegramStandIn,
            build=lambda s, o: TelegramNotifier(
                bot_token=telegram.BOT_TOKEN,
                chat_id=telegram.CHAT_ID,
                api_url=s.api_url,
                name="telegram.ops",
                **o,
            ),
            config=lambda s: {
                "telegram": {
                    "ops": {
                        "bot_token": telegram.BOT_TOKEN,
                        "chat_id": telegram.CHAT_ID,
                        "api_url": s.api_url,
                    }
                }
            },
            replies=HTTP_REPLIES,
            malformed_requests=2,  # the HTML, then the plain text alone
        ),
        Rig(
            id="stdout",
            kind="stdout",
            name="stdout",
            http=False,
            secrets=(),
            start=_Stream,
            build=lambda s, o: StdoutNotifier(s.stream),
            config=lambda s: {"stdout": {}},
        ),
    ]


def _rigs() -> list[Rig]:
    """Every rig: the ones above, then each `tests/alerts/rig_<kind>.py` module's `rigs()`."""
    found = _builtin_rigs()
    for module in sorted(pkgutil.iter_modules(tests.alerts.__path__), key=lambda m: m.name):
        if module.name.startswith("rig_"):
            found += importlib.import_module(f"tests.alerts.{module.name}").rigs()
    return found


RIG_IDS = [rig.id for rig in _rigs()]
HTTP_RIG_IDS = [rig.id for rig in _rigs() if rig.http]


def rig_named(rig_id: str) -> Iterator[Rig]:
    """The rig `rig_id` with its stand-in started; closed after."""
    (rig,) = [r for r in _rigs() if r.id == rig_id]
    rig.standin = rig.start()
    try:
        yield rig
    finally:
        rig.close()


def kinds_with_a_rig() -> set[str]:
    return {rig.kind for rig in _rigs()}
