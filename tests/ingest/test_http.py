"""OTLP/HTTP as clients send it: chunked bodies, Expect: 100-continue, keep-alive; bounded by it all."""

from __future__ import annotations

import gzip
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.ingest.conftest import Receiving
from tests.ingest.test_receiver import JSON, PB, logs_request, post, status_of
from watchdog.core.errors import UsageError
from watchdog.core.store import Store
from watchdog.daemon.ingest.otlp_http import HttpServer


def count(store: Store, table: str) -> int:
    return int(store.query(f"SELECT count() FROM {table}").rows[0][0])


@contextmanager
def connect(endpoint: str) -> Iterator[socket.socket]:
    parts = urlsplit(endpoint)
    with closing(socket.create_connection((parts.hostname or "", parts.port or 0), 30)) as sock:
        yield sock


def chunked(body: bytes, size: int) -> bytes:
    """`body` in chunks of `size` bytes, as Transfer-Encoding: chunked frames it."""
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def head(extra: str = "", path: str = "/v1/logs", content_type: str = PB) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
        f"Transfer-Encoding: chunked\r\n{extra}\r\n"
    ).encode()


def answer(sock: socket.socket) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response


def test_a_chunked_body_is_stored_as_a_sized_one(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A body sent with Transfer-Encoding: chunked and no Content-Length (Node's http does so)
    is stored exactly as the same body sent with a Content-Length."""
    receiver = receiving()
    with connect(receiver.endpoint) as sock:
        sock.sendall(head() + chunked(logs_request(5), 7))
        response = answer(sock)
        assert response.status == 200, response.read()
    receiver.load()
    assert count(store, receiver.logs_table) == 5


def test_chunked_json_and_gzip_are_read_as_they_come(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A chunked gzip body and a chunked JSON body are both decoded and stored."""
    receiver = receiving()
    with connect(receiver.endpoint) as sock:
        sock.sendall(
            head("Content-Encoding: gzip\r\n") + chunked(gzip.compress(logs_request(4)), 9)
        )
        assert answer(sock).status == 200
    document = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "j"}]}]}]}
    with connect(receiver.endpoint) as sock:
        sock.sendall(head(content_type=JSON) + chunked(json.dumps(document).encode(), 5))
        assert answer(sock).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 5


def test_every_limit_holds_for_a_chunked_body(receiving: Callable[..., Receiving]) -> None:
    """Chunked: a decoded body over max_body, one decompressing past it, too many records: 413."""
    receiver = receiving(max_body=64 * 1024, max_records=5)
    bodies = {
        "over max_body": (b"", chunked(b"\0" * (80 * 1024), 4096)),
        "decompresses past": (
            b"Content-Encoding: gzip\r\n",
            chunked(gzip.compress(b"\0" * (8 * 1024 * 1024)), 4096),
        ),
        "too many records": (b"", chunked(logs_request(6), 100)),
    }
    for why, (extra, body) in bodies.items():
        with connect(receiver.endpoint) as sock:
            sock.sendall(head(extra.decode()) + body)
            assert answer(sock).status == 413, why
    assert receiver.ingest.spool.queued_bytes == 0


def test_a_body_cut_mid_chunk_is_never_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A chunked body whose client goes away mid-chunk, or whose framing is broken (400), stores
    nothing; the receiver goes on serving."""
    receiver = receiving()
    body = chunked(logs_request(3), 50)
    with connect(receiver.endpoint) as sock:
        sock.sendall(head() + body[: len(body) // 2])
        sock.shutdown(socket.SHUT_WR)
        try:
            got = sock.recv(1024)
        except ConnectionResetError:
            got = b""
        assert got == b"" or got.startswith(b"HTTP/1.1 400")  # no one may be left to read it
    with connect(receiver.endpoint) as sock:
        sock.sendall(head() + b"zz\r\nnot a chunk\r\n0\r\n\r\n")
        assert answer(sock).status == 400
    assert post(receiver.endpoint, logs_request(2)).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 2


def test_expect_100_continue_is_answered_before_the_body(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A client that asks `Expect: 100-continue` is told to go on before it sends the body."""
    receiver = receiving()
    body = logs_request(3)
    with connect(receiver.endpoint) as sock:
        sock.sendall(
            b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):  # the interim response, whole
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert answer(sock).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 3


def test_one_keep_alive_connection_carries_many_requests(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Requests sent one after the other on one connection, sized and chunked, are each answered."""
    receiver = receiving()
    parts = urlsplit(receiver.endpoint)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    for n in range(1, 4):
        connection.request("POST", "/v1/logs", logs_request(n), {"Content-Type": PB})
        assert connection.getresponse().read() is not None
        sock = connection.sock
        connection.request(
            "POST", "/v1/logs", iter([logs_request(n + 10)]), {"Content-Type": PB}
        )  # an iterable body: http.client sends it chunked
        response = connection.getresponse()
        assert response.status == 200
        response.read()
        assert connection.sock is sock  # the same connection
    connection.close()
    receiver.load()
    assert count(store, receiver.logs_table) == sum(n + n + 10 for n in range(1, 4))


def test_a_content_length_that_is_no_number_is_400(receiving: Callable[..., Receiving]) -> None:
    """`Content-Length: ²` (a digit to str.isdigit, not to int) is a 400, not a traceback."""
    receiver = receiving()
    with connect(receiver.endpoint) as sock:
        sock.sendall(
            "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            "Content-Length: ²\r\n\r\n".encode()
        )
        assert answer(sock).status == 400
    assert post(receiver.endpoint, logs_request(1)).status == 200


def test_json_nested_a_thousand_deep_is_400(receiving: Callable[..., Receiving]) -> None:
    """A JSON body nested 1,000 deep (in a record's body, or anywhere) is a 400 with a Status."""
    receiver = receiving()
    deep = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":' + b"[" * 1000 + b"]" * 1000
    deep += b"}]}]}]}"
    response = post(receiver.endpoint, deep, content_type=JSON)
    assert response.status == 400
    assert "deep" in json.loads(response.read())["message"]
    response = post(receiver.endpoint, b"[" * 100_000 + b"]" * 100_000, content_type=JSON)
    assert response.status == 400


def test_millions_of_empty_records_are_refused_before_they_are_decoded(
    receiving: Callable[..., Receiving],
) -> None:
    """16 KB of gzip holding 8 million empty records: 413 once the limit is passed while the
    records are counted on the bytes (none is decoded: the count is never known)."""
    receiver = receiving()
    records = b"\x12\x00" * ((16 * 1024 * 1024 - 20) // 2)  # log_records, each an empty message
    scope = b"\x12" + _varint(len(records)) + records
    request = b"\x0a" + _varint(len(scope)) + scope
    response = post(receiver.endpoint, gzip.compress(request), Content_Encoding="gzip")
    assert response.status == 413
    assert status_of(response).message == "more than 50000 records in one request"


def test_millions_of_empty_attributes_are_refused_before_they_are_decoded(
    receiving: Callable[..., Receiving],
) -> None:
    """One log record with 8 million empty attributes (16 MiB once decompressed): 413 once the
    messages are past what the records allowed may hold, counted on the bytes, nothing built."""
    receiver = receiving()
    attributes = b"\x32\x00" * ((16 * 1024 * 1024 - 30) // 2)  # LogRecord.attributes, empty
    record = b"\x12" + _varint(len(attributes)) + attributes
    scope = b"\x12" + _varint(len(record)) + record
    request = b"\x0a" + _varint(len(scope)) + scope
    response = post(receiver.endpoint, gzip.compress(request), Content_Encoding="gzip")
    assert response.status == 413
    assert status_of(response).message == "more than 1610000 messages in one request"
    assert receiver.ingest.spool.queued_bytes == 0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_idle_connections_hold_no_thread_and_requests_still_answer(
    receiving: Callable[..., Receiving],
) -> None:
    """200 connections that send nothing cost no thread, and a request is still answered."""
    receiver = receiving()
    parts = urlsplit(receiver.endpoint)
    before = threading.active_count()
    idle = [socket.create_connection((parts.hostname or "", parts.port or 0)) for _ in range(200)]
    try:
        assert post(receiver.endpoint, logs_request(1)).status == 200
        assert threading.active_count() <= before + 2
    finally:
        for sock in idle:
            sock.close()


@contextmanager
def serving(receiver: Receiving, **bounds: Any) -> Iterator[str]:
    """A second OTLP/HTTP server on `receiver` with bounds of the test's own: its endpoint."""
    server = HttpServer(receiver.ingest.receiver, "127.0.0.1:0", **bounds)
    try:
        yield f"http://{server.address[0]}:{server.address[1]}"
    finally:
        server.close()


def test_an_idle_connection_is_closed_after_the_timeout(
    receiving: Callable[..., Receiving],
) -> None:
    """A connection that sends nothing is closed by the receiver (here after 1 s)."""
    with serving(receiving(), idle_timeout=1) as endpoint, connect(endpoint) as sock:
        assert sock.recv(1) == b""  # the server closed it: EOF, well before 30 s


def test_a_host_that_is_no_address_is_one_usage_line(
    receiving: Callable[..., Receiving],
) -> None:
    """`--otlp a..b:4318` (no name resolves to it, checked without the network): one line
    naming the flag and the address, not a ValueError out of waitress."""
    with pytest.raises(
        UsageError, match=r"^--otlp: cannot listen on a\.\.b:4318: no such address$"
    ):
        HttpServer(receiving().ingest.receiver, "a..b:4318")


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


def sized_head(length: int) -> bytes:
    return (
        f"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: {PB}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


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
