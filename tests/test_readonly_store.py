"""An embedded store on a read-only filesystem: named as such, once, by `check` and `check --notify`.

The engine writes to its directory even to read (its lock, its logs), so a
read-only store cannot be opened at all; it said `Error initializing
EmbeddedServer: . (BAD_ARGUMENTS)`, and `check --notify` added "could not
record the store error either" (issue 32, finding 14). The directory is made
read-only by a bind mount in a private mount namespace (`unshare -rm`), as
the full-disk tests do: root ignores file modes, not a read-only mount.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_env import clean_env

REPO = Path(__file__).parents[1]
BIN = Path(sys.executable).parent / "memory-watchdog"
SETUP = """
import sys
from tests.builder import M, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("s1").starts(T0).recalls(T0 + M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""


def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    return (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode == 0
    )


# The tests run the CLI as a process on a store another process wrote: left out of make test-fast.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _namespaces(),
        reason="needs `unshare -rm` (user and mount namespaces) to mount read-only",
    ),
]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store with one session, written by another process."""
    directory = tmp_path_factory.mktemp("readonly") / "store"
    subprocess.run(
        [sys.executable, "-c", SETUP, f"chdb://{directory}"], check=True, cwd=REPO, timeout=120
    )
    return directory


def read_only(store_dir: Path, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`memory-watchdog ARGS --store chdb://<store_dir>` with the directory mounted read-only."""
    script = (
        f"mount --bind {store_dir} {store_dir} && mount -o remount,ro,bind {store_dir}"
        f" && exec {BIN} {' '.join(args)} --store chdb://{store_dir}"
    )
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )


def test_a_read_only_embedded_store_is_said_to_be_read_only(
    store_dir: Path, tmp_path: Path
) -> None:
    """`check`: exit 3, one line saying the directory is read-only and what to do."""
    done = read_only(store_dir, "check", "--at", "2026-11-28T04:00:00Z", tmp_path=tmp_path)
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"memory-watchdog: store chdb://{store_dir}: the store directory {store_dir} is"
        " read-only: the embedded engine writes to its directory even to read (its lock and"
        " logs); give it a writable one, or point --store at a ClickHouse server"
    )


def test_check_notify_on_a_read_only_store_says_so_once(store_dir: Path, tmp_path: Path) -> None:
    """`check --notify`: the same line once, and one line saying the `store` alert could not be
    recorded or sent since its state lives in that store (no second copy of the error)."""
    done = read_only(
        store_dir, "check", "--notify", "--at", "2026-11-28T04:00:00Z", tmp_path=tmp_path
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert sum("is read-only" in line for line in lines) == 1, lines
    assert lines[0] == (
        "memory-watchdog: alerts: the store alert was neither recorded nor sent: the"
        " watchdog keeps its alert state in this store, which cannot be opened (the daemon"
        " alerts its receivers directly when that happens)"
    )
    assert "read-only" in lines[1] and len(lines) == 2
