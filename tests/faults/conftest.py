"""Fixtures for the ClickHouse HTTP harness: the shared embedded engine and a server on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import clickhouse_connect
import pytest

from tests.faults.chserver import ClickHouseHTTPServer

PASSWORD = "secret"


@pytest.fixture(scope="module")
def embedded_client(store_url: str) -> Iterator[Any]:
    """An embedded clickhouse-connect client on the session's shared store directory.

    chdb hosts one engine per process, bound to one directory, so this opens
    the directory of tests/conftest.py's `store_url` (sharing the engine with
    its `store` when that is open) rather than one of its own. It is closed at
    the end of the module, not the session: tests/faults runs before
    tests/test_*.py, and an engine held open from here on would stop later
    tests that open an embedded store in a directory of their own.
    """
    client = clickhouse_connect.get_client(dsn=store_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def ch_server(embedded_client: Any) -> Iterator[ClickHouseHTTPServer]:
    """A ClickHouse HTTP server on 127.0.0.1 over the shared engine; user `default`, password `secret`."""
    with ClickHouseHTTPServer(embedded_client, users={"default": PASSWORD}) as server:
        yield server
