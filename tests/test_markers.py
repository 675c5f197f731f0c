"""The markers `make test-fast` selects by: `store` is set on every test that uses the store."""

from __future__ import annotations

import pytest

from watchdog.core.store import Store


def test_a_test_that_uses_the_store_is_marked_store(
    request: pytest.FixtureRequest, store: Store
) -> None:
    """Through the `store` fixture (and so `store_url`), the test is marked `store`."""
    assert request.node.get_closest_marker("store") is not None


def test_a_test_without_the_store_is_not_marked_store(request: pytest.FixtureRequest) -> None:
    """A test that asks for no store is left unmarked, in the inner loop."""
    assert request.node.get_closest_marker("store") is None
