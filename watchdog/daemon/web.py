"""The daemon's small HTTP server (`daemon --http`): the pages, health and status.

Routes, GET and HEAD only:

- `/` the latest page (`report.html` under `report.dir`);
- `/reports/` the archived pages, newest first; `/reports/<window-end>` one of
  them (`20261128T040000Z`, or the RFC 3339 time `2026-11-28T04:00:00Z`);
- `/healthz` 200 when the last run is younger than two schedule periods,
  else 503, with a JSON body saying why;
- `/status` the `status --format json` document;
- `/metrics` the daemon's Prometheus metrics (watchdog.daemon.metrics), in
  the text format or OpenMetrics, as the scraper's Accept header asks.

It is the standard library's `ThreadingHTTPServer` with no framework. The
daemon hands in what only it knows, as callables: the status document and
the age of the last run, the metrics' exposition. It binds loopback unless told otherwise.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from markupsafe import escape

from watchdog.core import jsontext
from watchdog.core.errors import UsageError
from watchdog.core.links import ARCHIVE, STAMP, parse_stamp
from watchdog.core.times import CLOCK_SKEW
from watchdog.report.files import LATEST

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
# The pages are self-contained: nothing may be fetched, no script may run.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

StatusDocument = Callable[[], Mapping[str, Any]]
LastRunAge = Callable[[], timedelta | None]
# The Accept header -> the metrics' body and content type.
MetricsExposition = Callable[[str | None], tuple[bytes, str]]


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:8787`, `:8787` or `8787` (loopback), `[::1]:8787`; port 0 picks a free one."""
    host, _, port = text.strip().rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--http: {text!r} is not HOST:PORT (e.g. 127.0.0.1:8787)")
    return host, int(port)


def health(age: timedelta | None, period: timedelta) -> tuple[int, dict[str, Any]]:
    """200 when the last run is younger than two periods, else 503; and the JSON body."""
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


def make_handler(
    report_dir: Path,
    *,
    status: StatusDocument,
    last_run_age: LastRunAge,
    period: timedelta,
    metrics: MetricsExposition | None = None,
) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving `report_dir` and the daemon's health and status."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "memory-watchdog"
        sys_version = ""

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def _route(self, *, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            if path in ("/", "/index.html"):
                self._file(report_dir / LATEST, head, missing="no report written yet")
            elif path in (f"/{ARCHIVE}", f"/{ARCHIVE}/"):
                self._send(200, "text/html; charset=utf-8", _index(report_dir).encode(), head)
            elif path.startswith(f"/{ARCHIVE}/"):
                name = parse_stamp(path[len(ARCHIVE) + 2 :])
                if name is None:
                    self._text(404, "not a window end (e.g. 20261128T040000Z)", head)
                else:
                    self._file(
                        report_dir / ARCHIVE / f"{name}.html", head, missing="no such report"
                    )
            elif path == "/healthz":
                code, body = health(self._safe(last_run_age), period)
                self._json(code, body, head)
            elif path == "/status":
                try:
                    document = dict(status())
                except Exception as exc:  # the store may be down: say so, do not crash
                    log.warning("/status: %s", exc)
                    self._json(503, {"error": str(exc).splitlines()[0] if str(exc) else "?"}, head)
                    return
                self._json(200, document, head)
            elif path == "/metrics" and metrics is not None:
                exposed, content_type = metrics(self.headers.get("Accept"))
                self._send(200, content_type, exposed, head)
            else:
                self._text(404, "not found (try /, /reports/, /healthz, /status, /metrics)", head)

        @staticmethod
        def _safe(age: LastRunAge) -> timedelta | None:
            try:
                return age()
            except Exception as exc:
                log.warning("/healthz: last run age unknown: %s", exc)
                return None

        def _file(self, path: Path, head: bool, *, missing: str) -> None:
            try:
                body = path.read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                self._text(404, missing, head)
                return
            self._send(200, "text/html; charset=utf-8", body, head)

        def _json(self, code: int, body: Mapping[str, Any], head: bool) -> None:
            text = jsontext.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n"
            self._send(code, "application/json", text.encode(), head)

        def _text(self, code: int, text: str, head: bool) -> None:
            self._send(code, "text/plain; charset=utf-8", (text + "\n").encode(), head)

        def _send(self, code: int, content_type: str, body: bytes, head: bool) -> None:
            self.send_response(code, HTTPStatus(code).phrase)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s " + format, self.address_string(), *args)

    return Handler


class _ServerV6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(
    listen: str, handler: type[BaseHTTPRequestHandler]
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Bind `listen` (HOST:PORT, loopback by default) and serve in a daemon thread.

    Stop it with `server.shutdown()` then `server.server_close()`.
    """
    host, port = parse_listen(listen)
    server_class = _ServerV6 if ":" in host else ThreadingHTTPServer
    try:
        server = server_class((host, port), handler)
    except OSError as exc:
        raise UsageError(f"--http: cannot listen on {host}:{port}: {exc.strerror}") from None
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="watchdog-http",
        daemon=True,
    )
    thread.start()
    return server, thread
