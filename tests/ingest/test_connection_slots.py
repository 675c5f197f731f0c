"""OTLP/HTTP's connection slots: connections that send nothing never lock an agent out.

A connection costs its opener no token and no byte: with 300 idle sockets,
or 600 reopened as fast as the receiver closed them, 0 of 8 requests were
answered within the SDK exporters' 10 s timeout (issue 32, finding 6). The
policy is nginx's when its `worker_connections` run out ("reusing
connections"): with every slot taken, the connection idle the longest (no
request begun on it, nothing being written) is closed for the new one, so a
connection sending a request is never closed for another, and the idle ones
go oldest first.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest

from tests.ingest.conftest import Receiving
from tests.ingest.test_receiver import PB, logs_request
from watchdog.daemon.ingest.otlp_http import MAX_CONNECTIONS

STRANGERS = 600  # past the MAX_CONNECTIONS (256) slots
PROBES = 8
EXPORT_TIMEOUT = 10.0  # the SDK exporters' default (OTEL_EXPORTER_OTLP_TIMEOUT)


def probe(endpoint: str) -> int:
    """One export as an SDK makes it, given up after EXPORT_TIMEOUT: its status."""
    parts = urlsplit(endpoint)
    connection = http.client.HTTPConnection(
        parts.hostname or "", parts.port, timeout=EXPORT_TIMEOUT
    )
    try:
        connection.request("POST", "/v1/logs", logs_request(1), {"Content-Type": PB})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def address(receiver: Receiving) -> tuple[str, int]:
    parts = urlsplit(receiver.endpoint)
    return parts.hostname or "", parts.port or 0


@contextmanager
def idle_connections(where: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    opened = [socket.create_connection(where, timeout=30) for _ in range(count)]
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


@contextmanager
def reopening(where: tuple[str, int], count: int) -> Iterator[list[int]]:
    """`count` connections that send nothing, each reopened as soon as the receiver closes
    it; yields [reopened so far]."""
    chooser = selectors.DefaultSelector()
    stop = threading.Event()
    reopened = [0]

    def open_one() -> None:
        sock = socket.create_connection(where, timeout=30)
        sock.setblocking(False)
        chooser.register(sock, selectors.EVENT_READ)

    def churn() -> None:
        while not stop.is_set():
            for key, _ in chooser.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if data:
                    continue
                chooser.unregister(sock)
                sock.close()
                if not stop.is_set():
                    open_one()
                    reopened[0] += 1

    for _ in range(count):
        open_one()
    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield reopened
    finally:
        stop.set()
        thread.join(10)
        for key in list(chooser.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        chooser.close()


def test_the_slots_are_fewer_than_the_strangers() -> None:
    """The case below is past the slots (a guard on this module's premise)."""
    assert STRANGERS > 2 * MAX_CONNECTIONS


def test_six_hundred_idle_connections_never_lock_an_agent_out(
    receiving: Callable[..., Receiving],
) -> None:
    """600 connections that send nothing: each of 8 exports is answered within the SDK's
    10 s timeout (before: none was, the slots full until the idle timeout)."""
    receiver = receiving()
    with idle_connections(address(receiver), STRANGERS):
        statuses = [probe(receiver.endpoint) for _ in range(PROBES)]
    assert statuses == [200] * PROBES


@pytest.mark.slow
def test_six_hundred_connections_reopened_as_fast_as_closed_never_lock_an_agent_out(
    receiving: Callable[..., Receiving],
) -> None:
    """600 idle connections, each reopened the moment the receiver closes it: each of 8
    exports is still answered within 10 s, and what was closed for them was the strangers'."""
    receiver = receiving()
    with reopening(address(receiver), STRANGERS) as reopened:
        statuses = [probe(receiver.endpoint) for _ in range(PROBES)]
    assert statuses == [200] * PROBES
    assert reopened[0] >= PROBES  # the receiver made room by closing idle strangers
