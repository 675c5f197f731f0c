"""HEAD is answered with headers alone, on every route of both waitress servers, byte for byte.

`HEAD /metrics` sent `Transfer-Encoding: chunked` and a chunked body's end
(`0\\r\\n\\r\\n`) after its headers: prometheus_client's answer has no
length, and waitress knows nothing of HEAD (issue 45, finding 5). Each
answer here is read from a raw socket until the server closes it
(`Connection: close`), so every byte it sent is seen.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from tests.ingest.conftest import ingest_settings
from watchdog.daemon.ingest.otlp_http import HttpServer
from watchdog.daemon.ingest.service import Ingest
from watchdog.daemon.web import make_app, serve
from watchdog.report.files import LATEST

TOKEN = "s3cret-token"
# Every route of the pages (`/reports/x`: the 400 of a window end that is no time; `/nope`: 404).
PAGES = ["/", "/index.html", "/reports", "/reports/", "/reports/20261128T040000Z"]
PAGES += ["/reports/20261128T080000Z", "/reports/x", "/healthz", "/status", "/metrics", "/nope"]


def exchange(address: tuple[str, int], request: bytes) -> tuple[bytes, bytes]:
    """Every byte the server sends for `request` until it closes: (its head, what follows)."""
    with contextlib.closing(socket.create_connection(address, timeout=10)) as sock:
        sock.sendall(request)
        received = b""
        while piece := sock.recv(65536):
            received += piece
    head, _, rest = received.partition(b"\r\n\r\n")
    return head, rest


def ask(address: tuple[str, int], method: str, path: str, *headers: str) -> tuple[bytes, bytes]:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", "Connection: close", *headers]
    return exchange(address, ("\r\n".join(lines) + "\r\n\r\n").encode())


def header(head: bytes, name: str) -> str | None:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The daemon's pages with a report, an archived one, a status and a metric."""
    directory = tmp_path_factory.mktemp("pages")
    (directory / LATEST).write_text("<!doctype html><title>latest</title>")
    (directory / "reports").mkdir()
    (directory / "reports" / "20261128T040000Z.html").write_text("<title>04</title>")
    registry = CollectorRegistry()
    Gauge("memory_watchdog_example", "An example", registry=registry).set(3)
    app = make_app(
        directory,
        status=lambda: {"runs": []},
        last_run_age=lambda: timedelta(minutes=10),
        period=timedelta(hours=4),
        metrics=registry,
    )
    httpd, thread = serve("127.0.0.1:0", app)
    try:
        yield httpd.server_address
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.mark.parametrize("path", PAGES)
def test_head_is_the_get_answers_headers_without_a_byte_of_body(
    pages: tuple[str, int], path: str
) -> None:
    """HEAD on a route of the pages: GET's status and Content-Length, no Transfer-Encoding, and
    not one byte after the headers (before: `/metrics` was chunked, `0\\r\\n\\r\\n` after them)."""
    got_head, got_body = ask(pages, "GET", path)
    head, rest = ask(pages, "HEAD", path)
    assert rest == b""
    assert head.split(b"\r\n", 1)[0] == got_head.split(b"\r\n", 1)[0]
    assert header(head, "Transfer-Encoding") is None
    assert header(head, "Content-Length") == str(len(got_body))


def test_waitress_own_error_answer_to_head_has_no_body(pages: tuple[str, int]) -> None:
    """A HEAD waitress itself refuses (a body past its limit: 413) is answered with headers alone."""
    head, rest = ask(pages, "HEAD", "/healthz", f"Content-Length: {10**12}")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert int(header(head, "Content-Length") or 0) > 0
    assert rest == b""


@pytest.mark.parametrize("authorization", ["", f"Bearer {TOKEN}"])
def test_head_on_the_otlp_receiver_has_no_body(tmp_path: Path, authorization: str) -> None:
    """HEAD on OTLP/HTTP's paths, without the token (401) and with it (405): headers alone."""
    ingest = Ingest(
        ingest_settings(tmp_path, token=TOKEN),
        open_fn=lambda request: contextlib.nullcontext(None),  # never loads here
    )
    server = HttpServer(ingest.receiver, "127.0.0.1:0")
    extra = [f"Authorization: {authorization}"] if authorization else []
    try:
        for path, status in (("/v1/logs", b"405"), ("/v1/traces", b"405"), ("/nope", b"404")):
            head, rest = ask(server.address, "HEAD", path, *extra)
            assert head.split(b" ")[1] == (status if authorization else b"401")
            assert int(header(head, "Content-Length") or 0) > 0
            assert rest == b"", path
    finally:
        server.close()
