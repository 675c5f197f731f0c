"""One JSON POST with retries for the receivers without a client of their own: slack-sdk's
rules over the standard library (429 and Retry-After, backoff, what each status means, no
redirect followed), each request cut at the run's deadline however slowly it is answered, and
every line masked (docs/alerts.md#delivery)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import random
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any
from urllib.error import URLError

from alerts.base import Deadline, DeliveryError, Failure, bounded_retry_after
from watchdog.core.store import NOT_RESOLVED, name_not_resolved

USER_AGENT = "memory-watchdog"
MAX_BODY = 64 * 1024  # of an answer, read for its error line


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds from a Retry-After header (slack-sdk hands values as lists or strings).

    At most MAX_RETRY_AFTER (an hour), whatever the header says; None when it is no number.
    """
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) and value else value
            try:
                return bounded_retry_after(float(str(raw)))
            except ValueError:
                return None
    return None


def backoff_limit(base: float, attempt: int) -> float:
    """The longest the backoff before retry `attempt + 1` may take (base * 2^attempt, +50%)."""
    return base * (2.0**attempt) * 1.5


def backoff_wait(base: float, attempt: int) -> float:
    """The backoff before retry `attempt + 1`: base * 2^attempt plus up to half again."""
    wait = base * (2.0**attempt)
    return wait + random.uniform(0, wait / 2)


def describe_exception(exc: BaseException) -> str:
    """One line for a transport error (no URL in it: urllib's messages carry none)."""
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    if name_not_resolved(exc):
        return NOT_RESOLVED
    if isinstance(exc, URLError):
        return f"connection failed: {exc.reason}"
    return f"{type(exc).__name__}: {exc}".strip()


def basic_auth(url: str) -> tuple[str, str | None]:
    """`url` without its userinfo, and the `Authorization` value that userinfo stands for
    (`Basic`, as curl and Go's client, hence Alertmanager, send it; each part percent-decoded),
    or None when it has none. urllib would read `user:pass@host` as a host and a bad port."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    token = base64.b64encode(pair.encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


@dataclass(frozen=True)
class Answer:
    """What the server answered: status, headers, and the start of the body."""

    status: int
    headers: Mapping[str, str]
    body: str

    def line(self, limit: int = 200) -> str:
        """The body's first line, for an error message."""
        first = self.body.strip().splitlines()[0] if self.body.strip() else ""
        return first[:limit]


# An answer -> None when delivered, else the DeliveryError it amounts to.
Classify = Callable[[Answer], DeliveryError | None]


def html_page(answer: Answer) -> bool:
    """Whether a body is a web page (a login page, a proxy's, another service's), no API's."""
    content_type = next((v for k, v in answer.headers.items() if k.lower() == "content-type"), "")
    start = answer.body.lstrip()[:15].lower()
    return (content_type.lower().startswith("text/html") and bool(start)) or start.startswith(
        ("<!doctype", "<html")
    )


def not_the_service(
    name: str, answer: Answer, *, service: str, says: str, url_key: str
) -> DeliveryError:
    """A 2xx that is not `service`'s success (`says`): no delivery; the address is to check.

    Permanent: kept for the next run, one request per run, as for a wrong address; the body's
    words are not shown (a page may hold anything).
    """
    what = "an HTML page" if html_page(answer) else "no such answer"
    return DeliveryError(
        name,
        f"HTTP {answer.status} with {what}, not {service}'s success ({says}): check {url_key}",
        failure=Failure.PERMANENT,
    )


def classify_status(
    name: str, answer: Answer, *, service: str, key: str, url_key: str | None = None
) -> DeliveryError | None:
    """The usual meaning of an HTTP status for a receiver.

    `key` is the config key to fix when the service refuses the credentials (401, 403),
    `url_key` (default `key`) when the address is wrong (a redirect, 404, 405, 410).
    """
    status = answer.status
    if 200 <= status < 300:
        return None
    url_key = url_key or key
    shown = f"HTTP {status}" + (f": {answer.line()}" if answer.line() else "")
    if status == 429:
        wait = retry_after(answer.headers)
        after = f"; Retry-After {wait:g}s" if wait is not None else ""
        return DeliveryError(
            name,
            f"rate limited (HTTP 429{after})",
            retry_after=wait if wait is not None else 60.0,
        )
    if status >= 500 or status == 408:
        return DeliveryError(name, f"{service} answered {shown}")
    if 300 <= status < 400:
        return DeliveryError(
            name,
            f"{shown}: redirected, not followed; set {url_key} to the final address",
            failure=Failure.PERMANENT,
        )
    if status in (401, 403):
        return DeliveryError(name, f"{shown}: check {key}", failure=Failure.PERMANENT)
    if status in (404, 405, 410):
        return DeliveryError(name, f"{shown}: check {url_key}", failure=Failure.PERMANENT)
    return DeliveryError(name, f"{service} rejected the message: {shown}", failure=Failure.REJECTED)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class _Cut:
    """The sockets of one request, shut when its deadline passes (`cut`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.done = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.done:
                _shut(sock)

    def cut(self) -> None:
        with self._lock:
            self.done = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)  # unblocks a read in another thread, unlike close()


def _opener(cut: _Cut) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies from the environment included), its sockets handed to `cut`."""

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            cut.add(self.sock)

    class SecureConnection(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            cut.add(self.sock)

    class Handler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Connection, req)

    class SecureHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(SecureConnection, req)

    return urllib.request.build_opener(_NoRedirect(), Handler(), SecureHandler())


@dataclass(frozen=True)
class JsonPost:
    """Where and how a receiver posts: its URL, headers, timeouts, retries and masking."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    max_retries: int = 3
    backoff_base: float = 0.5
    mask: Callable[[str], str] = str
    # How long a 429 asks to wait (Retry-After; Telegram says it in the body instead).
    wait_of: Callable[[Answer], float | None] = lambda answer: retry_after(answer.headers)
    # Read a 2xx's body too (its start, within the deadline), for a service that says in it
    # whether it took the message (Telegram's `ok`, PagerDuty's `status`).
    read_success: bool = False

    def send(self, body: Any, deadline: Deadline, classify: Classify) -> Answer:
        """POST `body` as JSON until `classify` accepts an answer; DeliveryError otherwise."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempt = 0
        while True:
            if deadline.expired():
                raise DeliveryError(self.name, "no time left in alerts.delivery_timeout")
            timeout = max(0.05, min(self.timeout_s, deadline.remaining()))
            try:
                answer = self._post(data, timeout, deadline)
            except _TooLate:
                raise DeliveryError(
                    self.name, "no complete answer within alerts.delivery_timeout"
                ) from None
            except ValueError as exc:  # not a URL urllib can use
                raise DeliveryError(
                    self.name, self.mask(f"invalid URL: {exc}"), failure=Failure.PERMANENT
                ) from None
            except (OSError, HTTPException) as exc:  # refused, reset, timed out, TLS
                error = DeliveryError(self.name, self.mask(describe_exception(exc)))
                wait, limit = backoff_wait(self.backoff_base, attempt), None
            else:
                failed = classify(answer)
                if failed is None:
                    return answer
                error = DeliveryError(
                    self.name,
                    self.mask(failed.problem),
                    failure=failed.failure,
                    retry_after=failed.retry_after,
                )
                if error.failure is not Failure.TRANSIENT:
                    raise error
                if answer.status == 429:
                    asked = self.wait_of(answer)
                    wait = limit = 1.0 if asked is None else asked
                else:
                    wait, limit = backoff_wait(self.backoff_base, attempt), None
            bound = limit if limit is not None else backoff_limit(self.backoff_base, attempt)
            if attempt >= self.max_retries or not deadline.allows(bound):
                raise error
            deadline.sleep(wait)
            attempt += 1

    def _post(self, data: bytes, timeout: float, deadline: Deadline) -> Answer:
        """One request, cut at the deadline (then _TooLate) however slowly the server answers."""
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **self.headers}
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        cut = _Cut()
        timer = threading.Timer(deadline.remaining(), cut.cut)
        timer.daemon = True
        timer.start()
        try:
            with _opener(cut).open(request, timeout=timeout) as response:
                if cut.done:  # http.client took the cut inside the headers for their end
                    raise _TooLate
                # The body only where it says whether the message was taken; a slow one is
                # cut at the deadline like the rest of the answer.
                body = _read(response) if self.read_success else ""
                if cut.done:
                    raise _TooLate
                return Answer(response.status, dict(response.headers), body)
        except urllib.error.HTTPError as exc:
            with exc:
                return Answer(exc.code, dict(exc.headers or {}), _read(exc))
        except (OSError, HTTPException):
            if cut.done:
                raise _TooLate from None
            raise
        finally:
            timer.cancel()


class _TooLate(Exception):
    """The deadline cut a request short."""


def _read(response: Any) -> str:
    return bytes(response.read(MAX_BODY)).decode("utf-8", errors="replace")
