"""Stand-ins on 127.0.0.1 for an Alertmanager-style webhook consumer and PagerDuty's Events API v2.

The receivers' real HTTP client (urllib, `alerts.receivers.http`) talks to
them. Each records every request and answers from a script of replies
(then `default`):

- `OK`: the service's success (webhook `200`, PagerDuty `202` with its JSON);
- `rate_limited(seconds)`: `429` with `Retry-After`;
- `SERVER_ERROR`: `500`;
- `timeout(seconds)`: answers (504) only after that long (the client gives up first);
- `UNAUTHORIZED`: `401`, `NOT_FOUND`: `404`, `BAD_REQUEST`: `400`;
- `REDIRECT`: `302` to another path (a POST must not follow it), `redirect(code)` another 3xx;
- `trickle(seconds, length)`: a `200` whose status line and headers (`length` bytes) come
  one byte every `seconds` (a receiver that starts answering and never finishes);
- `HANG`: no answer at all until the stand-in closes;
- `ECHO`: `404` whose body echoes the request's last path segment and query values,
  decoded, as a consumer saying "no such hook <id>" does.

`PagerDutyStandIn` checks each event as PagerDuty does (a 32-character
routing key, a known action, a payload with summary, source and a known
severity for a trigger, a dedup key for a resolve) and answers `400
invalid event` otherwise; it keeps the incidents, opened by a trigger and
closed by the resolve with the same dedup key.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

WEBHOOK_PATH = "/hooks/s3cr3t-webhook-path"
BEARER = "s3cr3t-bearer-token"
ROUTING_KEY = "R0UT1NGK3YS3CR3T0000000000000000"  # 32 characters, as PagerDuty's are
EVENTS_PATH = "/v2/enqueue"


@dataclass(frozen=True)
class Reply:
    kind: str
    seconds: float = 0.0
    code: int = 0


OK = Reply("ok")
SERVER_ERROR = Reply("server_error")
UNAUTHORIZED = Reply("unauthorized")
NOT_FOUND = Reply("not_found")
BAD_REQUEST = Reply("bad_request")
REDIRECT = Reply("redirect", code=302)
ECHO = Reply("echo")
HANG = Reply("hang")


def trickle(seconds: float, length: int = 1000) -> Reply:
    return Reply("trickle", seconds, code=length)


def redirect(code: int) -> Reply:
    return Reply("redirect", code=code)


def rate_limited(seconds: float) -> Reply:
    return Reply("rate_limited", seconds)


def timeout(seconds: float) -> Reply:
    return Reply("timeout", seconds)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any  # the JSON posted: an object, or a list (Alertmanager)
    reply: Reply
    status: int = 0
    sent: int = 0  # bytes of a trickled answer written before the client went away

    @property
    def delivered(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class HttpStandIn:
    """The server, its script of replies, and what it received."""

    default: Reply = OK
    script: deque[Reply] = field(default_factory=deque)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    success: int = 200
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8") if length else ""
                try:
                    body = json.loads(raw) if raw else {}
                except json.JSONDecodeError:
                    body = {"_raw": raw}
                with standin.lock:
                    reply = standin.script.popleft() if standin.script else standin.default
                    request = Request(self.path, dict(self.headers), body, reply)
                    standin.requests.append(request)
                standin.answer(self, request)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def reply(self, *replies: Reply) -> None:
        """Answer the next requests with these, then with `default`."""
        self.script.extend(replies)

    def delivered(self) -> list[Request]:
        return [r for r in self.requests if r.delivered]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed.set()  # ends the answers that hang or trickle
        self.server.shutdown()
        self.server.server_close()

    def _trickle(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        """A 200 a byte at a time, until it is complete or the client is gone.

        The request counts as delivered only when the whole answer went out.
        """
        head = b"HTTP/1.1 200 OK\r\nX-Slow: "
        tail = b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        answer = head + b"x" * max(0, request.reply.code - len(head) - len(tail)) + tail
        try:
            while request.sent < len(answer) and not self.closed.wait(request.reply.seconds):
                handler.wfile.write(answer[request.sent : request.sent + 1])
                handler.wfile.flush()
                request.sent += 1
        except (BrokenPipeError, ConnectionResetError):
            return  # the client cut the request
        if request.sent == len(answer):
            request.status = 200

    def accept(self, request: Request) -> tuple[int, dict[str, Any] | str]:
        """The success answer (PagerDuty's checks the event first)."""
        return self.success, "ok"

    def answer(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        reply = request.reply
        headers = {"Content-Type": "text/plain"}
        status: int
        body: dict[str, Any] | str
        if reply.kind == "timeout":  # the client has given up by then: not delivered
            time.sleep(reply.seconds)
            status, body = 504, "too late"
        elif reply.kind == "hang":
            self.closed.wait()
            return
        elif reply.kind == "trickle":
            self._trickle(handler, request)
            return
        elif reply.kind == "ok":
            status, body = self.accept(request)
        elif reply.kind == "rate_limited":
            status, body = 429, "rate limited"
            headers["Retry-After"] = f"{reply.seconds:g}"
        elif reply.kind == "redirect":
            status, body = reply.code, "moved"
            headers["Location"] = "/elsewhere"
        elif reply.kind == "echo":
            parts = urlsplit(request.path)
            last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1])
            values = [v for _, v in parse_qsl(parts.query)]
            status, body = 404, f"no such hook {last} (query {', '.join(values)})"
        else:
            status, body = {
                "server_error": (500, "internal error"),
                "unauthorized": (401, "unauthorized"),
                "not_found": (404, "not found"),
                "bad_request": (400, "bad request"),
            }[reply.kind]
        request.status = status
        if isinstance(body, dict):
            headers["Content-Type"] = "application/json"
            body = json.dumps(body)
        try:
            handler.send_response(status)
            for key, value in headers.items():
                handler.send_header(key, value)
            data = body.encode("utf-8")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout reply)


@dataclass
class WebhookStandIn(HttpStandIn):
    """A webhook consumer at `url` (200 on success)."""

    @property
    def url(self) -> str:
        return self.base + WEBHOOK_PATH

    def documents(self) -> list[dict[str, Any]]:
        """The bodies it accepted, in order."""
        return [r.body for r in self.delivered()]


_ACTIONS = ("trigger", "acknowledge", "resolve")
_SEVERITIES = ("critical", "error", "warning", "info")


def event_errors(event: dict[str, Any]) -> list[str]:
    """What PagerDuty would find wrong with an Events API v2 event."""
    errors = []
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("Length of 'routing_key' is incorrect (should be 32 characters)")
    action = event.get("event_action")
    if action not in _ACTIONS:
        errors.append("'event_action' is invalid (must be one of trigger, acknowledge, resolve)")
    if action in ("acknowledge", "resolve") and not event.get("dedup_key"):
        errors.append("'dedup_key' is required for acknowledge and resolve")
    if action == "trigger":
        payload = event.get("payload") or {}
        for name in ("summary", "source", "severity"):
            if not payload.get(name):
                errors.append(f"'payload.{name}' is missing or blank")
        if payload.get("severity") not in _SEVERITIES:
            errors.append("'payload.severity' is invalid")
    return errors


@dataclass
class PagerDutyStandIn(HttpStandIn):
    """PagerDuty's Events API v2 at `url`: 202 for a valid event, 400 otherwise."""

    success: int = 202

    @property
    def url(self) -> str:
        return self.base + EVENTS_PATH

    def _trickle(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        """A 200 a byte at a time, until it is complete or the client is gone.

        The request counts as delivered only when the whole answer went out.
        """
        head = b"HTTP/1.1 200 OK\r\nX-Slow: "
        tail = b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        answer = head + b"x" * max(0, request.reply.code - len(head) - len(tail)) + tail
        try:
            while request.sent < len(answer) and not self.closed.wait(request.reply.seconds):
                handler.wfile.write(answer[request.sent : request.sent + 1])
                handler.wfile.flush()
                request.sent += 1
        except (BrokenPipeError, ConnectionResetError):
            return  # the client cut the request
        if request.sent == len(answer):
            request.status = 200

    def accept(self, request: Request) -> tuple[int, dict[str, Any] | str]:
        errors = event_errors(request.body)
        if errors:
            return 400, {
                "status": "invalid event",
                "message": "Event object is invalid",
                "errors": errors,
            }
        return 202, {
            "status": "success",
            "message": "Event processed",
            "dedup_key": request.body.get("dedup_key", ""),
        }

    def events(self) -> list[dict[str, Any]]:
        """The events it accepted, in order."""
        return [r.body for r in self.delivered()]

    def incidents(self) -> dict[str, str]:
        """dedup key -> "triggered" or "resolved", after every event accepted."""
        state: dict[str, str] = {}
        for event in self.events():
            key = event["dedup_key"]
            if event["event_action"] == "trigger":
                state[key] = "triggered"
            elif event["event_action"] == "resolve" and key in state:
                state[key] = "resolved"
        return state


AM_PATH = "/api/v2/alerts"
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def alertmanager_errors(body: Any) -> list[str]:
    """What Alertmanager's API v2 would refuse in a `POST /api/v2/alerts` body."""
    if not isinstance(body, list):
        return ["body must be a list of alerts"]
    errors = []
    for index, alert in enumerate(body):
        labels = alert.get("labels") if isinstance(alert, dict) else None
        if not isinstance(labels, dict) or not labels:
            errors.append(f"{index}.labels in body is required")
            continue
        for name, value in labels.items():
            if not _LABEL_NAME.fullmatch(name) or not isinstance(value, str):
                errors.append(f'invalid label set: invalid name "{name}"')
        starts, ends = alert.get("startsAt"), alert.get("endsAt")
        if starts and ends and _time(ends) <= _time(starts):
            errors.append("start time must be before end time")
        url = alert.get("generatorURL")
        if url is not None and not re.match(r"[a-z][a-z0-9+.-]*://\S+$", str(url)):
            errors.append(f'{index}.generatorURL in body must be of type uri: "{url}"')
    return errors


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class AlertmanagerStandIn(HttpStandIn):
    """Alertmanager's `POST /api/v2/alerts`: 200 for alerts it takes, 400 as it refuses them.

    The real Alertmanager is tested in tests/alerts/test_alertmanager.py; this one
    answers whatever the fault tests script.
    """

    @property
    def url(self) -> str:
        return self.base

    def accept(self, request: Request) -> tuple[int, dict[str, Any] | str]:
        if request.path != AM_PATH:
            return 404, "404 page not found"
        errors = alertmanager_errors(request.body)
        if errors:
            return 400, errors[0]
        return 200, ""

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert it took, in order."""
        return [alert for request in self.delivered() for alert in request.body]
