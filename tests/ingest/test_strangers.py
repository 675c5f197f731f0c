"""What OTLP/HTTP holds for a client it will refuse: its body is never kept, and nothing waits on it.

waitress buffered a body (in a temporary file past 512 KiB) and answered
`100 Continue` before the application checked the token: 40 bodies of 16
MiB minus one byte, sent without a token, held 667 MB of temporary files
(issue 32, finding 9). The token, the path, the content type and encoding,
the length and the admission are now judged on the headers, before the
body is read; a refused body is read and dropped, and one past what the
server reads at all is not waited for. Without the token a request is 401
whatever its length: waitress's own 413 for a body past its limit came
first and told a stranger the limit (issue 45, finding 6).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.conftest import Receiving
from tests.ingest.test_http import answer, chunked, connect
from tests.ingest.test_receiver import PB, logs_request, post, status_of

TOKEN = "s3cret-token"
TERABYTE = 10**12
BODY = 2 * 1024 * 1024  # past waitress's 512 KiB in memory: a temporary file while it comes
HELD = 8  # clients holding a body without the token


def temporary_bytes() -> int:
    """Bytes of the temporary files this process holds open (unlinked, as waitress's are)."""
    total, where = 0, os.path.realpath(tempfile.gettempdir())
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(where) and target.endswith("(deleted)"):
                total += os.stat(f"/proc/self/fd/{fd}").st_size
        except OSError:
            continue
    return total


def channels(receiver: Receiving) -> list[Any]:
    """The HTTP server's connections (waitress channels) now."""
    server = receiver.ingest._http
    assert server is not None
    return [c for c in list(server._map.values()) if hasattr(c, "request")]


def head(length: int, *extra: str) -> bytes:
    lines = [
        "POST /v1/logs HTTP/1.1",
        "Host: x",
        f"Content-Type: {PB}",
        f"Content-Length: {length}",
    ]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


@pytest.fixture
def held() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def test_bodies_sent_without_the_token_are_never_kept(
    receiving: Callable[..., Receiving], held: ExitStack
) -> None:
    """Eight clients without the token each send 2 MiB of a body announced one byte longer,
    and hold: once the receiver has read every byte of them, it keeps none (no temporary
    file), and a client with the token is answered meanwhile."""
    receiver = receiving(token=TOKEN, max_body=4 * 1024 * 1024)
    before = temporary_bytes()
    socks = [held.enter_context(connect(receiver.endpoint)) for _ in range(HELD)]
    for sock in socks:
        sock.sendall(head(BODY + 1) + bytes(BODY))
    deadline = time.monotonic() + 60
    while sum(_received(c) for c in channels(receiver)) < HELD * BODY:  # all read
        assert time.monotonic() < deadline, "the receiver never read the bodies"
        time.sleep(0.05)
    assert temporary_bytes() - before < BODY  # was HELD * BODY: each body in a temporary file
    ok = post(receiver.endpoint, logs_request(1), Authorization=f"Bearer {TOKEN}")
    assert ok.status == 200


def _received(channel: Any) -> int:
    request = channel.request
    return int(getattr(request, "body_bytes_received", 0)) if request is not None else 0


def test_expect_100_continue_without_the_token_is_answered_401_at_once(
    receiving: Callable[..., Receiving],
) -> None:
    """`Expect: 100-continue` without the token: the answer is 401 (no `100 Continue`: the
    client never sends its body), and the connection is closed after it."""
    receiver = receiving(token=TOKEN)
    with connect(receiver.endpoint) as sock:
        sock.sendall(head(BODY, "Expect: 100-continue"))
        response = answer(sock)
        assert response.status == 401
        assert response.getheader("Connection") == "close"
        response.read()


def test_a_refused_body_leaves_the_connection_usable(receiving: Callable[..., Receiving]) -> None:
    """A body sent whole with a wrong token is read and dropped, answered 401, and the same
    keep-alive connection then carries a request with the token (200)."""
    receiver = receiving(token=TOKEN)
    body = logs_request(2)
    with connect(receiver.endpoint) as sock:
        sock.sendall(head(len(body), "Authorization: Bearer wrong") + body)
        refused = answer(sock)
        assert refused.status == 401
        refused.read()
        sock.sendall(head(len(body), f"Authorization: Bearer {TOKEN}") + body)
        taken = answer(sock)
        assert taken.status == 200
        taken.read()


def test_the_token_is_checked_before_anything_else_is_said(
    receiving: Callable[..., Receiving], tmp_path: Path
) -> None:
    """Without the token, a request that would be refused for other reasons too (no such path,
    an unknown content type, a body past max_body) is 401: a stranger learns nothing else."""
    receiver = receiving(token=TOKEN, max_body=1024)
    assert post(receiver.endpoint, b"x", path="/v1/nope").status == 401
    assert post(receiver.endpoint, b"x", content_type="text/plain").status == 401
    assert post(receiver.endpoint, bytes(4096)).status == 401


def test_a_terabyte_body_without_the_token_is_401_before_a_byte_of_it(
    receiving: Callable[..., Receiving],
) -> None:
    """Headers without the token announcing a 1 TB body, and no byte of it: 401 at once, the
    limit not named, the connection closed (before: waitress's 413 "exceeds max_body of ...")."""
    receiver = receiving(token=TOKEN, max_body=1024 * 1024)
    with connect(receiver.endpoint) as sock:
        sock.settimeout(5)  # answered as the headers end, not after a body that never comes
        sock.sendall(head(TERABYTE))
        response = answer(sock)
        assert response.status == 401
        assert response.getheader("Connection") == "close"
        assert status_of(response).message == "missing or wrong bearer token"
        assert sock.recv(1) == b""


def test_a_terabyte_body_with_the_token_is_413_naming_the_limit_before_a_byte_of_it(
    receiving: Callable[..., Receiving],
) -> None:
    """The same with the token: 413 at once naming `max_body`, the limit a client can act on
    (before: waitress's, which counts the wire bytes), and the connection closed."""
    receiver = receiving(token=TOKEN, max_body=1024 * 1024)
    with connect(receiver.endpoint) as sock:
        sock.settimeout(5)
        sock.sendall(head(TERABYTE, f"Authorization: Bearer {TOKEN}"))
        response = answer(sock)
        assert response.status == 413
        assert response.getheader("Connection") == "close"
        message = f"body of {TERABYTE} bytes; the limit is {1024 * 1024}"
        assert status_of(response).message == message


def test_a_chunked_body_past_the_limit_without_the_token_is_401(
    receiving: Callable[..., Receiving],
) -> None:
    """A chunked body without the token, past what the server reads at all: dropped as it
    comes, then 401 and closed (before: waitress's 413 naming its limit)."""
    receiver = receiving(token=TOKEN, max_body=64 * 1024)
    framing = head(0).replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    with connect(receiver.endpoint) as sock:
        sock.settimeout(10)
        sock.sendall(framing + chunked(bytes(256 * 1024), 16 * 1024)[:-5])
        response = answer(sock)
        assert response.status == 401
        assert response.getheader("Connection") == "close"
