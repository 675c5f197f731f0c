"""Shared fixtures: one embedded ClickHouse store per test process, and a HOME per test.

The embedded engine binds a process to one directory, so every test shares
this store and isolates itself with tables of its own (`unique_table`). It
is opened with the engine config naming the clusters of local shards
(tests/cluster.py), so cluster tests run in it too.

No test touches the user's files: each runs under a HOME and XDG directories
of its own (`own_home`), which the processes it starts inherit; the test
process itself, and every process it starts outside a test (collection,
wider fixtures), runs under a fence of the same variables that nothing may
write to, checked after every test (tests/home_fence.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import home_fence
from tests.cluster import engine_config
from watchdog.core.store import Store, open_store


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported: this process's HOME and XDG dirs are the fence (each
    xdist worker configures its own)."""
    config.stash[FENCE] = home_fence.Fence.make()
    config.stash[FENCE].enter()


def pytest_unconfigure(config: pytest.Config) -> None:
    fence = config.stash.get(FENCE, None)
    if fence is not None:
        fence.leave()


FENCE = pytest.StashKey[home_fence.Fence]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the embedded store (the `store_url` fixture, directly or through
    `store`) is marked `store`, before `-m` selects: make test-fast leaves those out but for
    the `inner_loop` ones, so a new store test needs no marking to stay out of it."""
    for item in items:
        if "store_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.store)


@pytest.fixture(autouse=True)
def own_home(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[home_fence.Home]:
    """The test's own HOME and XDG data, config, cache and state directories, in the
    environment of the test and of every process it starts; afterwards, the fence is empty
    (nothing the test or the wider fixtures it set up ran wrote outside their own)."""
    home = home_fence.Home.under(tmp_path_factory.mktemp("home", numbered=True))
    for name, value in home.env().items():
        monkeypatch.setenv(name, value)
    yield home
    request.config.stash[FENCE].check(request.node.nodeid)


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"chdb://{tmp_path_factory.mktemp('store')}"


@pytest.fixture(scope="session")
def store(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    config = engine_config(tmp_path_factory.mktemp("engine"))
    with open_store(store_url, engine_config=config) as opened:
        yield opened
