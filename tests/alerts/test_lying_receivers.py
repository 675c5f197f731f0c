"""A receiver's endpoint that answers 2xx without delivering: each receiver reads its service's success.

Any 2xx counted as delivered (issue 32, finding 10): a Telegram `api_url`
pointing at an HTML page, or answering `{"ok": false, ...}` with 200, gave
"1 delivered". What each service says on success, and what is read:

- Telegram's Bot API: `{"ok": true, "result": ...}`;
- Slack: an incoming webhook answers the body `ok`; the Web API `{"ok": true}`
  (slack-sdk reads it);
- PagerDuty's Events API v2: `202` with `{"status": "success", ...}`;
- Alertmanager's `POST /api/v2/alerts`: `200` with no body; any 2xx is taken,
  as Prometheus takes it, but not an HTML page (a login page, another service);
- a webhook: any 2xx, its contract (as Alertmanager's `webhook_config`).

A lying endpoint is a local server answering every POST with one scripted
status, content type and body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from alerts.base import Deadline, DeliveryError, Failure, Notifier
from alerts.notifiers import (
    AlertmanagerNotifier,
    PagerDutyNotifier,
    SlackNotifier,
    TelegramNotifier,
    WebhookNotifier,
)
from alerts.testing import FakeTimer
from tests.alerts.receiver_rigs import firing_message

# Each test waits on its stand-in server's shutdown (half a second): left out of make test-fast.
pytestmark = pytest.mark.slow

JSON = "application/json"
HTML = "text/html; charset=utf-8"
PAGE = "<!doctype html><html><body>Sign in to continue</body></html>"
BOT_TOKEN = "123456:s3cr3t-bot-token"


class LyingService:
    """Answers every POST with `status`, `content_type` and `body`; counts the requests."""

    def __init__(self, status: int, content_type: str, body: str) -> None:
        self.requests = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                service.requests += 1
                data = body.encode()
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


BUILD: dict[str, Callable[[str], Notifier]] = {
    "telegram": lambda url: TelegramNotifier(
        bot_token=BOT_TOKEN, chat_id="-100123", api_url=url, name="telegram.ops"
    ),
    "slack-webhook": lambda url: SlackNotifier(webhook_url=url + "/services/T0/B0/s3cr3t"),
    "slack-token": lambda url: SlackNotifier(
        token="xoxb-s3cr3t", channel="#memory-alerts", base_url=url + "/api/"
    ),
    "pagerduty": lambda url: PagerDutyNotifier(
        routing_key="R" * 32, url=url + "/v2/enqueue", name="pagerduty.oncall"
    ),
    "alertmanager": lambda url: AlertmanagerNotifier(urls=[url], name="alertmanager.prod"),
    "webhook": lambda url: WebhookNotifier(url=url + "/hook", name="webhook.team"),
}

# What each service answers when it took the message.
SUCCESS = {
    "telegram": (200, JSON, '{"ok": true, "result": {"message_id": 7}}'),
    "slack-webhook": (200, HTML, "ok"),  # Slack's own content type for the body `ok`
    "slack-token": (200, JSON, '{"ok": true, "channel": "C1", "ts": "1.2"}'),
    "pagerduty": (202, JSON, '{"status": "success", "message": "Event processed"}'),
    "alertmanager": (200, JSON, ""),
    "webhook": (200, HTML, PAGE),  # any 2xx, whatever the body: the webhook's contract
}

# 2xx answers that are no delivery.
LIES = {
    "telegram-html": ("telegram", 200, HTML, PAGE),
    "telegram-ok-false": (
        "telegram",
        200,
        JSON,
        '{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}',
    ),
    "telegram-empty": ("telegram", 200, JSON, "{}"),
    "slack-webhook-html": ("slack-webhook", 200, HTML, PAGE),
    "slack-webhook-empty": ("slack-webhook", 204, "", ""),
    "slack-token-html": ("slack-token", 200, HTML, PAGE),
    "slack-token-ok-false": ("slack-token", 200, JSON, '{"ok": false, "error": "not_in_channel"}'),
    "pagerduty-html": ("pagerduty", 200, HTML, PAGE),
    "pagerduty-not-success": ("pagerduty", 202, JSON, '{"status": "invalid event"}'),
    "pagerduty-empty": ("pagerduty", 202, "", ""),
    "alertmanager-html": ("alertmanager", 200, HTML, PAGE),
}


@pytest.fixture
def serve() -> Iterator[Callable[[int, str, str], LyingService]]:
    started: list[LyingService] = []

    def start(status: int, content_type: str, body: str) -> LyingService:
        started.append(LyingService(status, content_type, body))
        return started[-1]

    yield start
    for service in started:
        service.close()


def deadline() -> Deadline:
    return Deadline(timedelta(seconds=30), FakeTimer())


@pytest.mark.parametrize("lie", list(LIES))
def test_a_2xx_that_is_not_the_services_success_is_no_delivery(
    serve: Callable[[int, str, str], LyingService], lie: str
) -> None:
    """The endpoint answers 2xx but not as the service says success: not delivered, the message
    kept for the next run (permanent: "check" the key naming the address, once per run), and
    the line names it without the body's words."""
    kind, status, content_type, body = LIES[lie]
    service = serve(status, content_type, body)
    notifier = BUILD[kind](service.url)
    with pytest.raises(DeliveryError) as caught:
        notifier.send(firing_message(), deadline())
    assert caught.value.failure is not Failure.REJECTED  # kept: the message is not at fault
    assert "Sign in" not in caught.value.problem
    assert service.requests >= 1


@pytest.mark.parametrize("kind", list(SUCCESS))
def test_the_services_own_success_is_a_delivery(
    serve: Callable[[int, str, str], LyingService], kind: str
) -> None:
    """What each service answers on success is a delivery (passes before too: the check must
    not refuse it)."""
    service = serve(*SUCCESS[kind])
    BUILD[kind](service.url).send(firing_message(), deadline())
    assert service.requests == 1
