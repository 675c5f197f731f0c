"""Fakes for running the daemon in the test's process: a clock the test moves, a store opener.

The daemon takes both as collaborators (`Daemon(clock=..., open_store_fn=...)`),
so its ticks run at instants the test chooses, on the test's shared embedded
store, and the store can fail to open on request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from watchdog.core.errors import StoreError, StoreLockedError
from watchdog.core.settings import Settings
from watchdog.core.store import Store


@dataclass
class MovableClock:
    """A clock the test sets."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


LOCKED = StoreLockedError("chdb:///store", "the embedded store is held by process 4242")


@dataclass
class StoreOpener:
    """Opens the shared test store (never closing it), or raises `failure` while one is set;
    `open` counts the uses in progress (0: the daemon holds no store)."""

    store: Store
    failure: StoreError | None = None
    open: int = 0

    @contextlib.contextmanager
    def __call__(self, settings: Settings) -> Iterator[Store]:
        if self.failure is not None:
            raise self.failure
        self.open += 1
        try:
            yield self.store
        finally:
            self.open -= 1

    def fail_with(self, failure: StoreError = LOCKED) -> None:
        self.failure = failure

    def recover(self) -> None:
        self.failure = None
