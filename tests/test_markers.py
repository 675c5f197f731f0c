"""The markers the suite is run by: `store` (set on every test that uses the store) for `make
test-fast`, and `xdist_group` for `make pytest`'s `--dist loadgroup`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


GROUPED = """
import pytest
pytestmark = pytest.mark.xdist_group("one")
def test_a(): pass
def test_b(): pass
def test_c(): pass
def test_d(): pass
"""


@pytest.mark.slow
def test_loadgroup_runs_a_group_on_one_worker(tmp_path: Path) -> None:
    """Under `--dist loadgroup` (make pytest) the tests of one `xdist_group` run on one worker,
    so a group's module fixtures are built once, not on every worker."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    # The inner run is a session of its own: none of this worker's PYTEST_* variables (worker
    # id, run id, current test), no stdin, and only the xdist plugin it is about. Its time out is
    # generous, since it starts three interpreters on a machine the suite already loads; on a
    # time out the failure shows what the inner run had printed.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "xdist",
                "-n",
                "2",
                "--dist",
                "loadgroup",
                "-v",
                "-p",
                "no:cacheprovider",
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as stalled:
        printed = stalled.stdout.decode() if isinstance(stalled.stdout, bytes) else stalled.stdout
        pytest.fail(f"the inner pytest run stalled; it had printed:\n{printed}")
    assert done.returncode == 0, done.stdout + done.stderr
    passed = [line for line in done.stdout.splitlines() if " PASSED " in line]
    assert len(passed) == 4
    assert len({line.split("]")[0] for line in passed}) == 1, passed  # one worker: [gwN]
