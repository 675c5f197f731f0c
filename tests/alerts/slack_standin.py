"""A stand-in for Slack on 127.0.0.1: incoming webhooks and `chat.postMessage`.

The real slack-sdk talks to it (`WebhookClient(url)` with a URL under
`/services/`, `WebClient(base_url=.../api/)`). It records every request and
answers from a script of replies (then `default`), each as Slack does:

- `OK`: webhook `200 ok`; API `200 {"ok": true, ...}`;
- `rate_limited(seconds)`: `429` with `Retry-After`;
- `SERVER_ERROR`: `500`;
- `timeout(seconds)`: answers only after that long (the client gives up first);
- `INVALID_AUTH`: webhook `403 invalid_token`; API `200 {"ok": false, "error": "invalid_auth"}`;
- `CHANNEL_NOT_FOUND`: webhook `404 channel_not_found`; API the same error;
- `INVALID_BLOCKS`: webhook `400 invalid_blocks`; API `{"ok": false, "error": "invalid_blocks"}`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WEBHOOK_PATH = "/services/T000TEST/B000TEST/s3cr3tWebhookPart"
TOKEN = "xoxb-0000-s3cr3t-token"


@dataclass(frozen=True)
class Reply:
    kind: str
    seconds: float = 0.0


OK = Reply("ok")
SERVER_ERROR = Reply("server_error")
INVALID_AUTH = Reply("invalid_auth")
CHANNEL_NOT_FOUND = Reply("channel_not_found")
INVALID_BLOCKS = Reply("invalid_blocks")


def rate_limited(seconds: float) -> Reply:
    return Reply("rate_limited", seconds)


def timeout(seconds: float) -> Reply:
    return Reply("timeout", seconds)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    reply: Reply

    @property
    def delivered(self) -> bool:
        return self.reply.kind == "ok"

    @property
    def text(self) -> str:
        return str(self.body.get("text", ""))

    @property
    def raw(self) -> str:
        return json.dumps(self.body, ensure_ascii=False)


@dataclass
class SlackStandIn:
    """The server, its script of replies, and what it received."""

    default: Reply = OK
    script: deque[Reply] = field(default_factory=deque)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

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
                    standin.requests.append(Request(self.path, dict(self.headers), body, reply))
                standin.answer(self, reply)

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
    def webhook_url(self) -> str:
        return self.base + WEBHOOK_PATH

    @property
    def api_url(self) -> str:
        return self.base + "/api/"

    def reply(self, *replies: Reply) -> None:
        """Answer the next requests with these, then with `default`."""
        self.script.extend(replies)

    def delivered(self) -> list[Request]:
        return [r for r in self.requests if r.delivered]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        api = handler.path.startswith("/api/")
        if api and handler.headers.get("Authorization") != f"Bearer {TOKEN}":
            reply = INVALID_AUTH
        status, body, headers = 200, "ok", {"Content-Type": "text/plain"}
        if reply.kind == "timeout":
            time.sleep(reply.seconds)
        elif reply.kind == "rate_limited":
            status, body = 429, "rate_limited"
            headers["Retry-After"] = f"{reply.seconds:g}"
        elif reply.kind == "server_error":
            status, body = 500, "internal_error"
        elif reply.kind in ("invalid_auth", "channel_not_found", "invalid_blocks"):
            status = {"invalid_auth": 403, "channel_not_found": 404, "invalid_blocks": 400}[
                reply.kind
            ]
            body = "invalid_token" if reply.kind == "invalid_auth" else reply.kind
        if api:
            headers["Content-Type"] = "application/json; charset=utf-8"
            if reply.kind in ("invalid_auth", "channel_not_found", "invalid_blocks"):
                status, body = 200, json.dumps({"ok": False, "error": reply.kind})
            elif status == 429:
                body = json.dumps({"ok": False, "error": "ratelimited"})
            elif status == 500:
                body = json.dumps({"ok": False, "error": "internal_error"})
            else:
                body = json.dumps({"ok": True, "channel": "C000", "ts": f"{time.time():.6f}"})
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
