"""OTLP/HTTP as clients send it: chunked bodies, Expect: 100-continue, keep-alive, slow clients;
bounded by it all."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from google.rpc import status_pb2

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


def sized_head(length: int) -> bytes:
    return (
        f"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: {PB}\r\n"
        f"Content-Length: {length}\r\n\r\n"
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


def half_closed(endpoint: str, sent: bytes) -> tuple[http.client.HTTPResponse, bytes]:
    """Send `sent`, close the sending side (SHUT_WR), and read the answer: it and its body."""
    with connect(endpoint) as sock:
        sock.sendall(sent)
        sock.shutdown(socket.SHUT_WR)
        response = answer(sock)
        body = response.read()
        assert sock.recv(1) == b""  # then the receiver closes the connection
        return response, body


def test_a_body_cut_short_by_a_half_close_is_400_and_never_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A client that closes its sending side mid-body (mid-chunk, or before its Content-Length)
    and reads is answered 400 with a Status in its content type, and nothing is spooled."""
    receiver = receiving()
    body = chunked(logs_request(3), 50)
    response, said = half_closed(receiver.endpoint, head() + body[: len(body) // 2])
    assert response.status == 400
    assert response.getheader("Content-Type") == PB
    assert "cut short" in status_pb2.Status.FromString(said).message
    document = json.dumps(
        {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "j"}]}]}]}
    ).encode()
    framed = chunked(document, 5)
    response, said = half_closed(
        receiver.endpoint, head(content_type=JSON) + framed[: len(framed) // 2]
    )
    assert response.status == 400
    assert "cut short" in json.loads(said)["message"]
    whole = logs_request(3)
    response, said = half_closed(
        receiver.endpoint, sized_head(len(whole)) + whole[: len(whole) - 1]
    )
    assert response.status == 400
    assert "cut short" in status_pb2.Status.FromString(said).message
    assert receiver.ingest.spool.queued_bytes == 0
    assert post(receiver.endpoint, logs_request(2)).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 2


def test_a_body_cut_mid_chunk_is_never_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A chunked body whose client goes away mid-chunk (closing both ways: no one to answer), or
    whose framing is broken (400), stores nothing; the receiver goes on serving."""
    receiver = receiving()
    body = chunked(logs_request(3), 50)
    with connect(receiver.endpoint) as sock:
        sock.sendall(head() + body[: len(body) // 2])
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


# The loggers of what answers a request: the HTTP server and the receiver.
REQUEST_LOGGERS = (
    "waitress",
    "watchdog.daemon.ingest.otlp_http",
    "watchdog.daemon.ingest.receiver",
)


@contextmanager
def quietly(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    """What runs inside (one request, answered) logs at most one line about it, a debug line, and
    no traceback, neither in a log record nor on stderr."""
    caplog.set_level(logging.DEBUG)
    capfd.readouterr()
    caplog.clear()
    yield
    records = list(caplog.records)
    assert not [r.getMessage() for r in records if r.exc_info or "Traceback" in r.getMessage()]
    about = [r for r in records if r.name.startswith(REQUEST_LOGGERS)]
    assert len(about) <= 1, [r.getMessage() for r in about]
    assert all(r.levelno == logging.DEBUG for r in about), [r.getMessage() for r in about]
    assert "Traceback" not in capfd.readouterr().err


def test_a_content_length_that_is_no_number_is_400(
    receiving: Callable[..., Receiving],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """`Content-Length: ²` (a digit to str.isdigit, not to int) is a 400, not a traceback: at most
    one line is logged about it."""
    receiver = receiving()
    with quietly(caplog, capfd), connect(receiver.endpoint) as sock:
        sock.sendall(
            "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            "Content-Length: ²\r\n\r\n".encode()
        )
        assert answer(sock).status == 400
    assert post(receiver.endpoint, logs_request(1)).status == 200


def test_json_nested_a_thousand_deep_is_400(
    receiving: Callable[..., Receiving],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A JSON body nested 1,000 deep (in a record's body, or anywhere) is a 400 with a Status,
    and at most one line logged about it, no traceback."""
    receiver = receiving()
    deep = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":' + b"[" * 1000 + b"]" * 1000
    deep += b"}]}]}]}"
    with quietly(caplog, capfd):
        response = post(receiver.endpoint, deep, content_type=JSON)
        assert response.status == 400
        assert "deep" in json.loads(response.read())["message"]
    with quietly(caplog, capfd):
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


def test_large_bodies_at_once_wait_for_the_decode_budget(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Bodies decoded at once add up to at most max_body: four requests of 44 KB at once, with
    60 KiB of the 64 KiB budget held (as by a decode in progress), all wait, none answered;
    once it is given back each is decoded in turn (two would pass the budget), all four are
    answered 200 and stored, and the bytes held at once never passed the budget."""
    receiver = receiving(max_body=64 * 1024)
    budget = receiver.ingest.receiver.budget
    bodies = [logs_request(700, trace_id=bytes([n + 1]) * 16) for n in range(4)]  # not retries
    assert all(32 * 1024 < len(body) <= 64 * 1024 for body in bodies)  # two at once: past it
    answers: list[int] = []

    def send(body: bytes) -> None:
        answers.append(post(receiver.endpoint, body).status)

    clients = [threading.Thread(target=send, args=(body,)) for body in bodies]
    with budget.held(60 * 1024):
        for client in clients:
            client.start()
        deadline = time.monotonic() + 30
        while budget.waiting < 4:  # the four reached the budget, each read whole, and wait
            assert time.monotonic() < deadline, f"{budget.waiting} waiting, answers {answers}"
            time.sleep(0.01)
        time.sleep(0.2)
        assert budget.waiting == 4 and answers == []
    for client in clients:
        client.join(30)
    assert answers == [200] * 4
    assert budget.waiting == 0
    assert 60 * 1024 <= budget.peak <= 64 * 1024
    receiver.load()
    assert count(store, receiver.logs_table) == 4 * 700


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


# ---- slow clients: a request not received whole within its bound of its first byte is cut,
# whatever it trickles; a keep-alive connection idle between requests is not
# (docs/guarantees.md#hardening-round-3-the-receiver-its-spool-and-reload).

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


def test_closing_a_server_whose_trigger_is_closed_closes_its_sockets(
    receiving: Callable[..., Receiving],
) -> None:
    """A server whose loop can no longer be woken (its trigger closed under it: the CI run's
    `OSError: [Errno 9] Bad file descriptor` out of `stop`) closes its sockets all the same:
    `close()` raises nothing and the port refuses connections after it."""
    server = HttpServer(receiving().ingest.receiver, "127.0.0.1:0")
    server._server.trigger.close()  # what a server that closed itself leaves
    server.close()
    assert not server._thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(server.address, timeout=5).close()


def test_a_host_that_is_no_address_is_one_usage_line(
    receiving: Callable[..., Receiving],
) -> None:
    """`--otlp a..b:4318` (no name resolves to it, checked without the network): one line
    naming the flag and the address, not a ValueError out of waitress."""
    with pytest.raises(
        UsageError, match=r"^--otlp: cannot listen on a\.\.b:4318: no such address$"
    ):
        HttpServer(receiving().ingest.receiver, "a..b:4318")
