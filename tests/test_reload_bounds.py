"""A SIGHUP whose config read blocks (a hung NFS or FUSE mount) never stops judging, and says so.

`Reloads.load` read the file holding the lock the next run takes its
reloaded config under: the run waited on it, every later SIGHUP too, and
`/healthz` kept answering `ok` (issue 32, finding 8). The daemon runs in
this process (tests/daemon_rig.py); the hung mount is a config loader that
blocks until the test lets it go (a FIFO no longer blocks: the read refuses
what is no regular file, tests/test_config_read.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.daemon_rig import DELAY, Rig, end, new_rig, wait_until, write_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store


class HungMount:
    """A config loader that blocks, as a read from a hung mount does, until `release()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.entered = threading.Event()
        self._release = threading.Event()
        self.calls = 0

    def __call__(self) -> Settings:
        self.calls += 1
        self.entered.set()
        self._release.wait(timeout=120)
        return self.settings

    def release(self) -> None:
        self._release.set()


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return write_source(store)


@pytest.fixture
def rig(store: Store, source: str, tmp_path: Path) -> Iterator[Rig]:
    slack = SlackStandIn()
    yield new_rig(store, source, slack, tmp_path)
    slack.close()


@pytest.fixture
def daemon_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    caplog.set_level(logging.INFO, logger="watchdog")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]


def test_a_reload_whose_read_blocks_never_holds_up_judging(
    rig: Rig, daemon_log: Callable[[], list[str]]
) -> None:
    """SIGHUP with the config's read hung: the next run judges its window with the running
    config; the reload gives up after its bound with one error line; a SIGHUP while the read
    still hangs says so at once; once the read comes back, a SIGHUP reloads again."""
    hung = HungMount(rig.settings)
    daemon = rig.daemon(reload=hung, reload_timeout=timedelta(seconds=1))
    first = threading.Thread(target=daemon.reload)  # as SIGHUP's handler starts it
    first.start()
    try:
        assert hung.entered.wait(30)
        running = threading.Thread(target=rig.tick, args=(daemon, end(5) + DELAY))
        running.start()
        running.join(60)
        assert not running.is_alive(), "the run waited on the blocked reload"
        assert rig.windows()[-1] == (end(4), end(5))
        first.join(30)
        assert not first.is_alive()
        [gave_up] = [line for line in daemon_log() if line.startswith("SIGHUP")]
        assert gave_up == (
            "SIGHUP: config not reloaded, the running one stays: reading it did not finish"
            " within 1s (a hung mount?); a SIGHUP after the read comes back reloads it"
        )
        assert daemon.reload() is False  # at once: the hung read is still going
        assert daemon_log()[-1].startswith("SIGHUP: config not reloaded: the reload of ")
        assert hung.calls == 1  # no second read piled up behind the first
    finally:
        hung.release()
    wait_until(lambda: daemon.reload(), "a reload once the read came back")
    assert daemon_log()[-1] == "SIGHUP: config reloaded (no change); the next run uses it"
