"""OTLP/HTTP against slow clients: a request not received whole within its bound of its first
byte is cut, whatever it trickles; a keep-alive connection idle between requests is not
(docs/guarantees.md#hardening-round-3-the-receiver-its-spool-and-reload)."""

from __future__ import annotations

import http.client
import select
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from tests.ingest.conftest import Receiving
from tests.ingest.test_http import connect, count, serving, sized_head
from tests.ingest.test_receiver import PB, logs_request, post
from watchdog.core.store import Store

BOUND = 2.0  # seconds a request may take from its first byte (30 in the daemon)
EVERY = 0.5  # seconds between the bytes a slow client trickles


def trickle(endpoint: str, whole: bytes, slowly: bytes, meanwhile: Callable[[], None]) -> float:
    """Send `whole` at once, then `slowly` a byte every EVERY seconds until the server closes
    the connection, calling `meanwhile` once on the way: the seconds from the first byte to the
    close. The server must say nothing: the request was never received whole."""
    with connect(endpoint) as sock:
        began = time.monotonic()
        sock.sendall(whole)
        for sent, byte in enumerate(slowly):
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - began
            if select.select([sock], [], [], EVERY)[0]:
                try:
                    said = sock.recv(4096)
                except ConnectionResetError:
                    said = b""
                assert said == b"", said
                return time.monotonic() - began
            if sent == 2:
                meanwhile()
            if time.monotonic() - began > BOUND + 10:
                break
        raise AssertionError(f"still open {time.monotonic() - began:.1f}s after its first byte")


def test_a_body_trickled_a_byte_at_a_time_is_cut_and_never_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Headers at once, then a byte of the body every 0.5 s (slowloris): the connection is
    closed once the request is BOUND seconds old, nothing of it is stored, and another client
    is answered meanwhile."""
    receiver = receiving()
    body = logs_request(3)
    answered: list[int] = []
    with serving(receiver, max_request=BOUND) as endpoint:
        took = trickle(
            endpoint,
            sized_head(len(body)),
            body,
            lambda: answered.append(post(endpoint, logs_request(2)).status),
        )
    assert BOUND <= took <= BOUND + 3, took
    assert answered == [200]
    receiver.load()
    assert count(store, receiver.logs_table) == 2  # the other client's, none of the slow one's


def test_headers_trickled_a_byte_at_a_time_are_cut(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """The request line and headers a byte every 0.5 s: cut likewise, another client answered."""
    receiver = receiving()
    body = logs_request(3)
    answered: list[int] = []
    with serving(receiver, max_request=BOUND) as endpoint:
        took = trickle(
            endpoint,
            b"",
            sized_head(len(body)) + body,
            lambda: answered.append(post(endpoint, logs_request(2)).status),
        )
    assert BOUND <= took <= BOUND + 3, took
    assert answered == [200]
    receiver.load()
    assert count(store, receiver.logs_table) == 2


def test_a_keep_alive_connection_idle_between_requests_is_not_cut(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """The bound is per request, from its first byte: a connection that waits longer than it
    (yet less than the idle timeout) between two quick requests carries both."""
    receiver = receiving()
    with serving(receiver, max_request=BOUND) as endpoint:
        parts = urlsplit(endpoint)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        connection.request("POST", "/v1/logs", logs_request(1), {"Content-Type": PB})
        first = connection.getresponse()
        assert first.status == 200, first.read()
        first.read()
        sock = connection.sock
        time.sleep(BOUND + 1.5)
        connection.request("POST", "/v1/logs", logs_request(2), {"Content-Type": PB})
        second = connection.getresponse()
        assert second.status == 200, second.read()
        second.read()
        assert connection.sock is sock  # the same connection
        connection.close()
    receiver.load()
    assert count(store, receiver.logs_table) == 3
