"""The daemon's small HTTP server (`daemon --http`): the pages, `/healthz`, `/status`, `/metrics`.

`make_app` is a WSGI application routing GET and HEAD (a window end that is no time is a
400; `/metrics` is prometheus_client's WSGI app on the daemon's registry); `serve` runs it on
waitress bounded as the OTLP receiver's is (watchdog.daemon.waitress_bounds.BoundedServer): idle
connections in one loop with no thread, a fixed pool of workers, every slot taken the idlest
connection closed for a new one, a request not received whole in time cut. The routes and what
`/healthz` answers: docs/operations.md#the-daemons-pages-and-healthz.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import Any

from markupsafe import escape
from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress import wasyncore

from watchdog.core import jsontext
from watchdog.core.errors import UsageError
from watchdog.core.links import ARCHIVE, STAMP, parse_stamp
from watchdog.core.times import CLOCK_SKEW, rfc3339
from watchdog.daemon.ingest.state import SpoolState
from watchdog.daemon.waitress_bounds import BoundedServer, Bounds
from watchdog.report.files import LATEST

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
# The pages are self-contained: nothing may be fetched, no script may run.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

StatusDocument = Callable[[], Mapping[str, Any]]
LastRunAge = Callable[[], timedelta | None]
# (when the run was due, how late it is, what a run may take) when a run is overdue, else None.
Overdue = Callable[[], tuple[datetime, timedelta, timedelta] | None]
StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# The OTLP receiver's spool now.
ReceiverState = Callable[[], SpoolState]

WORKERS = 4  # threads serving requests: a scrape, a health check and a person at once
MAX_IDLE = 256  # connections (no thread each); every one taken, the idlest goes for a new one
IO_TIMEOUT = 10  # seconds a connection may stay silent both ways (waitress's channel_timeout)
MAX_CONNECTION = 30.0  # seconds a request may take to arrive whole after its first byte
MAX_BODY = 64 * 1024  # bytes of a request's body (GET and HEAD have none); past it, a 413
SWEEP_EVERY = 1  # seconds between the sweeps closing idle and slow connections


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:8787`, `:8787` or `8787` (loopback), `[::1]:8787`; port 0 picks a free one."""
    host, _, port = text.strip().rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--http: {text!r} is not HOST:PORT (e.g. 127.0.0.1:8787)")
    return host, int(port)


def health(
    age: timedelta | None,
    period: timedelta,
    receiver: SpoolState | None = None,
    overdue: tuple[datetime, timedelta, timedelta] | None = None,
) -> tuple[int, dict[str, Any]]:
    """200 when the last run is younger than two periods, no run is overdue (due, and not
    finished within what a run may take), and the receiver's spool, when there is one, can
    keep what it is sent; else 503; and the JSON body."""
    code, body = _run_health(age, period)
    if code == 200 and overdue is not None:
        due, late, allowed = overdue
        code = 503
        body.update(
            status="overdue",
            overdue_s=round(late.total_seconds(), 3),
            problem=f"the run due at {rfc3339(due)} has not finished {late.total_seconds():.0f}s"
            f" later (a run may take {allowed.total_seconds():.0f}s)",
        )
    if receiver is not None:
        body["ingest"] = receiver.to_json()
        if code == 200 and receiver.problem:
            code = 503
            body.update(status="spool", problem=f"the OTLP receiver: {receiver.problem}")
    return code, body


def _run_health(age: timedelta | None, period: timedelta) -> tuple[int, dict[str, Any]]:
    limit = 2 * period
    body: dict[str, Any] = {
        "last_run_age_s": None if age is None else round(age.total_seconds(), 3),
        "max_age_s": limit.total_seconds(),
    }
    if age is None:
        return 503, {"status": "no_run", **body, "problem": "no run recorded yet"}
    if age < -CLOCK_SKEW:
        return 503, {
            "status": "clock",
            **body,
            "problem": "the last run ends in the future: this host's clock is behind",
        }
    if age >= limit:
        return 503, {"status": "stale", **body, "problem": "the last run is older than 2 periods"}
    return 200, {"status": "ok", **body}


def _index(directory: Path) -> str:
    """A plain list of the archived pages, newest first, with relative links."""
    pages = sorted(
        (p.stem for p in (directory / ARCHIVE).glob("*.html") if STAMP.match(p.stem)),
        reverse=True,
    )
    items = "".join(f'<li><a href="/{ARCHIVE}/{escape(s)}">{escape(s)}</a></li>' for s in pages)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>memory-watchdog reports</title></head>"
        '<body style="font-family: system-ui, sans-serif; margin: 20px">'
        f'<h1>Reports</h1><p><a href="/">latest</a></p><ol>{items}</ol></body></html>'
    )


def make_app(
    report_dir: Path,
    *,
    status: StatusDocument,
    last_run_age: LastRunAge,
    period: timedelta,
    metrics: CollectorRegistry | None = None,
    receiver: ReceiverState | None = None,
    overdue: Overdue | None = None,
) -> App:
    """The WSGI application serving `report_dir` and the daemon's health, status and metrics."""
    exposition = make_wsgi_app(metrics) if metrics is not None else None

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        head = environ.get("REQUEST_METHOD") == "HEAD"
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _text(start_response, 501, "only GET and HEAD", head)
        # PATH_INFO is already unquoted by waitress (as latin-1, PEP 3333).
        path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
        try:
            if path == "/metrics" and exposition is not None:
                return _secured(exposition, environ, start_response, head)
            return _route(path, head, start_response)
        except Exception as exc:  # a bug of ours: one line, a 500, the server goes on
            log.warning("http %s: %s: %s", path[:200], type(exc).__name__, exc)
            return _text(start_response, 500, "internal error", head)

    def _route(path: str, head: bool, start_response: StartResponse) -> Iterable[bytes]:
        if path in ("/", "/index.html"):
            return _file(start_response, report_dir / LATEST, head, "no report written yet")
        if path in (f"/{ARCHIVE}", f"/{ARCHIVE}/"):
            page = _index(report_dir).encode()
            return _send(start_response, 200, "text/html; charset=utf-8", page, head)
        if path.startswith(f"/{ARCHIVE}/"):
            name = parse_stamp(path[len(ARCHIVE) + 2 :])
            if name is None:
                return _text(start_response, 400, "not a window end (e.g. 20261128T040000Z)", head)
            return _file(
                start_response, report_dir / ARCHIVE / f"{name}.html", head, "no such report"
            )
        if path == "/healthz":
            code, body = health(
                _safe(last_run_age),
                period,
                receiver() if receiver else None,
                overdue() if overdue else None,
            )
            return _json(start_response, code, body, head)
        if path == "/status":
            try:
                document = dict(status())
            except Exception as exc:  # the store may be down: say so, do not crash
                log.warning("/status: %s", exc)
                error = {"error": str(exc).splitlines()[0] if str(exc) else "?"}
                return _json(start_response, 503, error, head)
            return _json(start_response, 200, document, head)
        return _text(
            start_response, 404, "not found (try /, /reports/, /healthz, /status, /metrics)", head
        )

    return app


HEADERS = [
    ("Cache-Control", "no-store"),
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]


def _secured(
    inner: App, environ: dict[str, Any], start_response: StartResponse, head: bool
) -> Iterable[bytes]:
    """prometheus_client's answer, with the pages' headers and its length; to HEAD, the headers
    GET would have (its Content-Length too) and no body."""
    answered: list[tuple[str, list[tuple[str, str]]]] = []

    def kept(status: str, headers: list[tuple[str, str]], *exc: Any) -> None:
        answered.append((status, headers))

    body = b"".join(inner({**environ, "REQUEST_METHOD": "GET"}, kept))
    status, headers = answered[-1]
    start_response(status, [*headers, ("Content-Length", str(len(body))), *HEADERS])
    return [] if head else [body]


def _safe(age: LastRunAge) -> timedelta | None:
    try:
        return age()
    except Exception as exc:
        log.warning("/healthz: last run age unknown: %s", exc)
        return None


def _file(start_response: StartResponse, path: Path, head: bool, missing: str) -> Iterable[bytes]:
    try:
        body = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return _text(start_response, 404, missing, head)
    return _send(start_response, 200, "text/html; charset=utf-8", body, head)


def _json(
    start_response: StartResponse, code: int, body: Mapping[str, Any], head: bool
) -> Iterable[bytes]:
    text = jsontext.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n"
    return _send(start_response, code, "application/json", text.encode(), head)


def _text(start_response: StartResponse, code: int, text: str, head: bool) -> Iterable[bytes]:
    return _send(start_response, code, "text/plain; charset=utf-8", (text + "\n").encode(), head)


def _send(
    start_response: StartResponse, code: int, content_type: str, body: bytes, head: bool
) -> Iterable[bytes]:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *HEADERS]
    start_response(f"{code} {HTTPStatus(code).phrase}", headers)
    return [] if head else [body]


class WebServer(BoundedServer):
    """waitress serving the app on one address (the first the host resolves to), in a thread of
    its own; `shutdown()` and `server_close()` as socketserver's."""

    name = "http"
    title = "the server"
    thread_name = "watchdog-http"
    log = log

    def __init__(self, app: App, host: str, port: int) -> None:
        bounds = Bounds(  # read as a server is made: a test may narrow one
            ident="memory-watchdog",
            max_body=MAX_BODY,
            idle_timeout=IO_TIMEOUT,
            max_request=MAX_CONNECTION,
            workers=WORKERS,
            connections=MAX_IDLE,
            sweep_every=SWEEP_EVERY,
        )
        super().__init__(host, port, app, bounds, flag="--http", every_address=False)

    @property
    def server_address(self) -> tuple[str, int]:
        return self.address

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, let the requests in progress finish (bounded), close every connection."""
        self.close(timeout)

    def server_close(self) -> None:
        """Close what `shutdown` left (nothing, once it returned)."""
        wasyncore.close_all(self._map)


def serve(listen: str, app: App) -> tuple[WebServer, threading.Thread]:
    """Bind `listen` (HOST:PORT, loopback by default) and serve in a daemon thread.

    Stop it with `server.shutdown()` then `server.server_close()`.
    """
    host, port = parse_listen(listen)
    server = WebServer(app, host, port)
    server.start()
    return server, server.thread
