"""Tests leave the user's files alone: a HOME per test, and a fence that names any escape."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.home_fence import VARIABLES, Fence, Home
from watchdog.core.settings.load import DEMO_POINTER, data_dir_from

WRITE_EVERYWHERE = """
import os, pathlib
for variable in ("HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
    pathlib.Path(os.environ[variable], "written").write_text(variable)
pathlib.Path.home().joinpath(".written").write_text("~")
"""


def test_a_test_and_the_processes_it_starts_have_their_own_home(own_home: Home) -> None:
    """HOME and the four XDG directories are the test's own, in its process and in a process
    it starts with the inherited environment; nothing it writes there reaches the user's."""
    assert {k: os.environ[k] for k in VARIABLES} == own_home.env()
    subprocess.run([sys.executable, "-c", WRITE_EVERYWHERE], check=True, timeout=60)
    written = {p.relative_to(own_home.root).as_posix() for p in own_home.written()}
    assert {f"{name}/written" for name in VARIABLES.values()} | {"home/.written"} <= written


def test_the_data_directory_of_a_test_is_under_its_own_home(own_home: Home) -> None:
    """The watchdog's data directory (its default store, `last-demo-store`) resolves into the
    test's own XDG data directory."""
    assert data_dir_from(os.environ).is_relative_to(own_home.root)


def test_a_write_in_the_fence_fails_the_test_naming_the_path() -> None:
    """What lands in the fence (a `last-demo-store` under its data directory) fails the test
    it happened in, naming the test and the path; the fence is empty again afterwards."""
    fence = Fence.make()
    try:
        pointer = data_dir_from(fence.home.env()) / DEMO_POINTER
        pointer.parent.mkdir(parents=True)
        pointer.write_text("chdb:///tmp/pytest-of-someone/store")
        with pytest.raises(pytest.fail.Exception) as failed:
            fence.check("tests/test_html.py::test_demo")
        assert str(failed.value).startswith("tests/test_html.py::test_demo, or a fixture")
        assert f"data/memory-watchdog/{DEMO_POINTER}" in str(failed.value)
        assert fence.home.written() == []
        fence.check("tests/test_next.py::test_after")  # judged on its own: passes
    finally:
        fence.leave()


def test_an_empty_fence_passes() -> None:
    """A fence nothing wrote to lets the test pass."""
    fence = Fence.make()
    try:
        fence.check("tests/test_x.py::test_y")
    finally:
        fence.leave()
