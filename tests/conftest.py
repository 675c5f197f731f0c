"""Shared fixtures: one embedded ClickHouse store per test process.

The embedded engine binds a process to one directory, so every test shares
this store and isolates itself with tables of its own (`unique_table`). It
is opened with the engine config naming the clusters of local shards
(tests/cluster.py), so cluster tests run in it too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import engine_config
from watchdog.core.store import Store, open_store


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"chdb://{tmp_path_factory.mktemp('store')}"


@pytest.fixture(scope="session")
def store(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    config = engine_config(tmp_path_factory.mktemp("engine"))
    with open_store(store_url, engine_config=config) as opened:
        yield opened
