"""A stand-in for Telegram's Bot API on 127.0.0.1: `POST /bot<token>/sendMessage`.

It enforces what the Bot API documents for `sendMessage` with
`parse_mode = "HTML"` (https://core.telegram.org/bots/api#html-style), and
answers as Telegram does (`{"ok": false, "error_code", "description"}`):

- only the tags b, strong, i, em, u, ins, s, strike, del, span (with
  class="tg-spoiler"), tg-spoiler, a (with href), tg-emoji, code, pre and
  blockquote; every tag closed, in order; an unknown tag, an unclosed or
  mismatched one -> 400 "Bad Request: can't parse entities: ...";
- `<`, `>` and `&` only as part of a tag or an entity; the entities
  `&lt;` `&gt;` `&amp;` `&quot;` and numeric ones only -> else the same 400;
- 1 to 4,096 characters once the entities are parsed (UTF-16 code units)
  -> else 400 "Bad Request: message is too long" (or "text must be non-empty");
- the bot's token in the path (else 401 "Unauthorized") and a known chat
  (else 400 "Bad Request: chat not found").

Scripted replies as the other stand-ins (`reply`, `default`), in Telegram's
words: `rate_limited(s)` is a 429 with `parameters.retry_after` in the body
and no Retry-After header; `UNAUTHORIZED` a 401; `BAD_REQUEST` a 400 "can't
parse entities" whatever the message.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.alerts.http_standin import HttpStandIn, Request

BOT_TOKEN = "123456789:AAHs3cr3tT0kenPartXXXXXXXXXXXXXXXXX"
CHAT_ID = "-1001234567890"

ALLOWED = {
    "b": (),
    "strong": (),
    "i": (),
    "em": (),
    "u": (),
    "ins": (),
    "s": (),
    "strike": (),
    "del": (),
    "span": ("class",),
    "tg-spoiler": (),
    "a": ("href",),
    "tg-emoji": ("emoji-id",),
    "code": ("class",),
    "pre": (),
    "blockquote": ("expandable",),
}
_TAG = re.compile(r'<(/?)([a-z][a-z0-9-]*)((?:\s+[a-z-]+(?:="[^"<>]*")?)*)\s*>')
_ATTR = re.compile(r'([a-z-]+)(?:="([^"<>]*)")?')
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});")


class EntityError(ValueError):
    """Why Telegram cannot parse the entities of a text."""


def parse_html(text: str) -> str:
    """The text Telegram shows of `text` in its HTML subset; EntityError when it refuses it."""
    shown: list[str] = []
    open_tags: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char == "<":
            tag = _TAG.match(text, at)
            if tag is None:
                raise EntityError(f"Unexpected character '<' at byte offset {at}")
            closing, name, attributes = tag.group(1), tag.group(2), tag.group(3)
            if name not in ALLOWED:
                raise EntityError(f'Unsupported start tag "{name}" at byte offset {at}')
            if closing:
                if not open_tags or open_tags[-1] != name:
                    raise EntityError(
                        f'Unmatched end tag at byte offset {at}, expected "</{name}>"'
                    )
                open_tags.pop()
            else:
                for attribute, _ in _ATTR.findall(attributes):
                    if attribute not in ALLOWED[name]:
                        raise EntityError(f'Unsupported attribute "{attribute}" of tag "{name}"')
                open_tags.append(name)
            at = tag.end()
        elif char == "&":
            entity = _ENTITY.match(text, at)
            if entity is None:
                raise EntityError(f"Unsupported HTML entity at byte offset {at}")
            shown.append(html.unescape(entity.group(0)))
            at = entity.end()
        elif char == ">":
            raise EntityError(f"Unexpected character '>' at byte offset {at}")
        else:
            shown.append(char)
            at += 1
    if open_tags:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{open_tags[-1]}"')
    return "".join(shown)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class TelegramStandIn(HttpStandIn):
    """The Bot API's sendMessage for one bot and one chat; it keeps the messages it took."""

    @property
    def api_url(self) -> str:
        return self.base

    def accept(self, request: Request) -> tuple[int, dict[str, Any] | str]:
        if request.path != f"/bot{BOT_TOKEN}/sendMessage":
            return 401, _error(401, "Unauthorized")
        body = request.body
        if str(body.get("chat_id")) != CHAT_ID:
            return 400, _error(400, "Bad Request: chat not found")
        text = body.get("text")
        if not isinstance(text, str):
            return 400, _error(400, "Bad Request: message text is empty")
        if body.get("parse_mode") == "HTML":
            try:
                text = parse_html(text)
            except EntityError as exc:
                return 400, _error(400, f"Bad Request: can't parse entities: {exc}")
        elif body.get("parse_mode") is not None:
            return 400, _error(400, "Bad Request: unsupported parse_mode")
        if not text.strip():
            return 400, _error(400, "Bad Request: text must be non-empty")
        if utf16_length(text) > 4096:
            return 400, _error(400, "Bad Request: message is too long")
        return 200, {"ok": True, "result": {"message_id": len(self.requests), "text": text}}

    def answer(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        kind = request.reply.kind
        replies = {
            "rate_limited": (
                429,
                _error(
                    429,
                    f"Too Many Requests: retry after {request.reply.seconds:g}",
                    {"retry_after": request.reply.seconds},
                ),
            ),
            "server_error": (502, _error(502, "Bad Gateway")),
            "unauthorized": (401, _error(401, "Unauthorized")),
            "bad_request": (400, _error(400, "Bad Request: can't parse entities: forced")),
        }
        if kind not in replies:
            super().answer(handler, request)
            return
        status, body = replies[kind]
        request.status = status
        data = json.dumps(body).encode("utf-8")
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def messages(self) -> list[str]:
        """The texts it accepted, as Telegram shows them (entities parsed), in order."""
        shown = []
        for request in self.delivered():
            text = request.body["text"]
            shown.append(parse_html(text) if request.body.get("parse_mode") == "HTML" else text)
        return shown

    def sent_html(self) -> list[str]:
        """The HTML of every message it accepted."""
        return [r.body["text"] for r in self.delivered() if r.body.get("parse_mode") == "HTML"]


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters is not None:
        found["parameters"] = parameters
    return found
