"""The daemon's HTTP endpoints: pages, health and status, on loopback."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from watchdog.core.errors import UsageError
from watchdog.daemon import web
from watchdog.daemon.web import CSP, health, make_app, parse_listen, serve
from watchdog.report.files import LATEST

PERIOD = timedelta(hours=4)


class Daemon:
    """What the daemon hands the server: a status document and the last run's age."""

    def __init__(self) -> None:
        self.age: timedelta | None = timedelta(minutes=10)
        self.document: dict[str, Any] = {"runs": [], "alerts": []}
        self.fail = False

    def status(self) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("store http://default:***@db:8123 unreachable")
        return self.document

    def last_run_age(self) -> timedelta | None:
        return self.age


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    (tmp_path / LATEST).write_text("<!doctype html><title>latest</title>")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "20261128T040000Z.html").write_text("<title>04</title>")
    (tmp_path / "reports" / "20261128T000000Z.html").write_text("<title>00</title>")
    return tmp_path


@pytest.fixture
def daemon() -> Daemon:
    return Daemon()


@pytest.fixture
def server(pages: Path, daemon: Daemon) -> Iterator[tuple[str, int]]:
    app = make_app(pages, status=daemon.status, last_run_age=daemon.last_run_age, period=PERIOD)
    httpd, thread = serve("127.0.0.1:0", app)
    try:
        yield httpd.server_address[0], httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def get(server: tuple[str, int], path: str, method: str = "GET") -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection(*server, timeout=5)
    connection.request(method, path)
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def body(response: http.client.HTTPResponse) -> bytes:
    return response.body  # type: ignore[attr-defined,no-any-return]


def test_root_serves_the_latest_page(server: tuple[str, int]) -> None:
    """`/` serves report.html, with a policy that forbids fetching anything."""
    response = get(server, "/")
    assert response.status == 200
    assert body(response) == b"<!doctype html><title>latest</title>"
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["Content-Security-Policy"] == CSP
    assert response.headers["Cache-Control"] == "no-store"


def test_past_report_by_window_end(server: tuple[str, int]) -> None:
    """`/reports/<window-end>` serves an archived page, by stamp or RFC 3339 time."""
    assert body(get(server, "/reports/20261128T040000Z")) == b"<title>04</title>"
    assert body(get(server, "/reports/2026-11-28T00:00:00Z")) == b"<title>00</title>"
    assert get(server, "/reports/20261128T080000Z").status == 404


def test_report_paths_cannot_escape_the_directory(server: tuple[str, int]) -> None:
    """Anything but a window end under /reports/ is refused with a 400."""
    for path in ("/reports/..%2F" + LATEST, "/reports/../report.html", "/reports/%2Fetc%2Fpasswd"):
        assert get(server, path).status == 400


@pytest.mark.parametrize(
    "end",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01T00:00:00%2B14:00",
        "%ff%fe",
        "x" * 5000,
    ],
)
def test_a_window_end_no_time_can_hold_is_a_clean_400(server: tuple[str, int], end: str) -> None:
    """A window end that overflows UTC (year 1 at +14:00) or is no time at all is a 400, with a body."""
    response = get(server, f"/reports/{end}")
    assert response.status == 400
    assert body(response) == b"not a window end (e.g. 20261128T040000Z)\n"


def test_reports_index_lists_pages_newest_first(server: tuple[str, int]) -> None:
    """`/reports/` lists the archived pages with relative links."""
    text = body(get(server, "/reports/")).decode()
    assert text.index("20261128T040000Z") < text.index("20261128T000000Z")
    assert 'href="/reports/20261128T040000Z"' in text
    assert "http://" not in text and "https://" not in text


def test_no_report_yet_is_404(tmp_path: Path, daemon: Daemon) -> None:
    """Before the first run has written a page, `/` says so with a 404."""
    app = make_app(tmp_path, status=daemon.status, last_run_age=daemon.last_run_age, period=PERIOD)
    httpd, thread = serve(":0", app)
    try:
        response = get(httpd.server_address[:2], "/")  # type: ignore[arg-type]
        assert (response.status, body(response)) == (404, b"no report written yet\n")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_healthz_turns_503_when_runs_stop(server: tuple[str, int], daemon: Daemon) -> None:
    """`/healthz` is 200 while the last run is younger than two periods, then 503."""
    response = get(server, "/healthz")
    assert response.status == 200
    assert json.loads(body(response)) == {
        "status": "ok",
        "last_run_age_s": 600.0,
        "max_age_s": 28800.0,
    }
    daemon.age = 2 * PERIOD
    response = get(server, "/healthz")
    assert response.status == 503
    assert json.loads(body(response))["status"] == "stale"
    assert response.headers["Content-Type"] == "application/json"


def test_healthz_before_any_run_is_503(server: tuple[str, int], daemon: Daemon) -> None:
    """No run recorded yet is not health."""
    daemon.age = None
    response = get(server, "/healthz")
    assert response.status == 503
    assert json.loads(body(response))["status"] == "no_run"


def test_health_boundary() -> None:
    """Just under two periods is healthy; exactly two is not."""
    assert health(2 * PERIOD - timedelta(milliseconds=1), PERIOD)[0] == 200
    assert health(2 * PERIOD, PERIOD)[0] == 503


def test_status_serves_the_status_document(server: tuple[str, int], daemon: Daemon) -> None:
    """`/status` is the daemon's status document as JSON."""
    daemon.document = {"runs": [{"at": "2026-11-28T04:00:00Z", "status": "ok"}], "alerts": []}
    response = get(server, "/status")
    assert response.status == 200
    assert json.loads(body(response)) == daemon.document


def test_status_failure_is_503_with_one_line(server: tuple[str, int], daemon: Daemon) -> None:
    """When the status document cannot be built, `/status` is 503 with the reason."""
    daemon.fail = True
    response = get(server, "/status")
    assert response.status == 503
    assert json.loads(body(response)) == {"error": "store http://default:***@db:8123 unreachable"}


def test_head_has_no_body_and_unknown_is_404(server: tuple[str, int]) -> None:
    """HEAD answers headers only; an unknown path is a 404."""
    head = get(server, "/", method="HEAD")
    assert head.status == 200 and body(head) == b""
    assert int(head.headers["Content-Length"]) > 0
    assert get(server, "/admin").status == 404


def test_server_binds_loopback_by_default(server: tuple[str, int]) -> None:
    """The served page is on 127.0.0.1 only."""
    assert server[0] == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8787", ("127.0.0.1", 8787)),
        (":8787", ("127.0.0.1", 8787)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("[::1]:8787", ("::1", 8787)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    """--http takes HOST:PORT, binding loopback when the host is left out."""
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["", "localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_parse_listen_rejects_nonsense(text: str) -> None:
    """A listen address that is not HOST:PORT is a usage error."""
    with pytest.raises(UsageError, match="--http"):
        parse_listen(text)


def test_idle_connections_hold_no_thread_and_health_still_answers(
    server: tuple[str, int],
) -> None:
    """300 idle connections start no thread each, and /healthz still answers among them."""
    before = threading.active_count()
    idle = [socket.create_connection(server, timeout=5) for _ in range(300)]
    try:
        # Connections are accepted in the order they came: once /healthz is answered, the
        # server has accepted every idle one before it.
        assert get(server, "/healthz").status == 200
        assert threading.active_count() <= before + 2
    finally:
        for connection in idle:
            connection.close()


@pytest.mark.slow
def test_an_idle_connection_is_closed_after_the_timeout(
    pages: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that never sends its request is closed by the server, not kept forever."""
    monkeypatch.setattr(web, "IO_TIMEOUT", 1)
    app = make_app(pages, status=daemon.status, last_run_age=daemon.last_run_age, period=PERIOD)
    httpd, thread = serve("127.0.0.1:0", app)
    try:
        with socket.create_connection(httpd.server_address[:2], timeout=10) as idle:
            assert idle.recv(1) == b""  # closed by the server (a timeout here raises instead)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_a_client_that_goes_away_costs_at_most_one_log_line(
    pages: Path, daemon: Daemon, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Clients that disconnect before reading the answer leave no traceback, one line each at most."""
    (pages / LATEST).write_bytes(b"<!doctype html>" + b"x" * 8_000_000)
    app = make_app(pages, status=daemon.status, last_run_age=daemon.last_run_age, period=PERIOD)
    httpd, thread = serve("127.0.0.1:0", app)
    clients = 5
    caplog.set_level(logging.DEBUG, logger="watchdog.daemon.web")
    try:
        for _ in range(clients):
            connection = socket.create_connection(httpd.server_address[:2], timeout=5)
            connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
            connection.recv(1)  # the answer has begun
            # Reset, not a polite close: the server's next write fails at once.
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()
        assert get(httpd.server_address[:2], "/healthz").status == 200  # type: ignore[arg-type]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    records = [
        r
        for r in caplog.records
        if r.name == "watchdog.daemon.web" and "/healthz" not in r.getMessage()
    ]
    assert len(records) <= clients
    assert all(r.exc_info is None for r in records)
    assert "Traceback" not in capfd.readouterr().err


def test_metrics_are_prometheus_clients_exposition_with_the_pages_headers(pages: Path) -> None:
    """`/metrics` is prometheus_client's WSGI app on the registry handed in, with the headers."""
    registry = CollectorRegistry()
    Gauge("memory_watchdog_example", "An example", registry=registry).set(3)
    app = make_app(pages, status=dict, last_run_age=lambda: None, period=PERIOD, metrics=registry)
    httpd, thread = serve("127.0.0.1:0", app)
    try:
        response = get(httpd.server_address[:2], "/metrics")  # type: ignore[arg-type]
        head = get(httpd.server_address[:2], "/metrics", method="HEAD")  # type: ignore[arg-type]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    assert response.status == 200
    assert "memory_watchdog_example 3.0" in body(response).decode()
    assert response.headers["Content-Security-Policy"] == CSP
    assert (head.status, body(head)) == (200, b"")
