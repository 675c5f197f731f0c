"""The README's commands run as written after `make demo`, and the install warnings.

`make demo` puts memory-watchdog in `.venv/bin` (not on PATH) and fills the demo's own store;
the README's "After `make demo`" lines make every later command of it run as written. A store
missing where a command looks names the store the demo filled last. `--version` and
`config check` warn, in one line, when another installed distribution owns files in the
`watchdog` package (a real `.dist-info` with its RECORD on `sys.path`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.process_env import clean_env
from tests.readme_demo import (
    BIN,
    GROUP,
    SHELL,
    after_make_demo,
    bash,
    copy_of,
    readme_example,
)

pytestmark = pytest.mark.slow


@GROUP
def test_the_readmes_commands_run_as_written_after_make_demo(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """After `make demo` (.venv/bin/memory-watchdog demo) in a fresh HOME, the README's lines,
    then its `check --at 2026-11-28T00:00:00Z`, print exactly the README's output; and the
    "What next" commands the demo printed run once memory-watchdog is on PATH."""
    done_before = after_make_demo(tmp_path_factory)  # make demo, then the README's lines
    assert done_before.on_path_before.returncode != 0  # not on PATH
    assert done_before.make_demo.returncode == 0, done_before.make_demo.stderr
    assert done_before.readme_block.returncode == 0, done_before.readme_block.stderr
    env = copy_of(done_before, tmp_path / "home")
    command = "memory-watchdog check --at 2026-11-28T00:00:00Z"
    done = bash(f"{SHELL}\n{command}", env)  # in the shell the README's lines left
    assert done.returncode == 0, done.stderr
    # The commands it prints name the user's store where the README's name its example's.
    shown = re.sub(r"chdb://\S*/memory-watchdog/demo-store", "chdb:///tmp/demo/store", done.stdout)
    assert shown.endswith(readme_example(command)), done.stdout
    what_next = [
        line.strip()
        for line in done_before.make_demo.stdout.splitlines()
        if line.startswith("  memory-watchdog check --at ")
    ]
    assert what_next
    for line in what_next:
        again = bash(f"source .venv/bin/activate\n{line} >/dev/null", env)
        assert again.returncode in (0, 1), again.stderr  # judged (the demo breaches)


def test_no_store_here_names_the_store_the_demo_filled_elsewhere(tmp_path: Path) -> None:
    """`demo --store` elsewhere, then `check` with the default store: exit 3, naming that store."""
    env = clean_env(tmp_path / "xdg")
    elsewhere = f"chdb://{tmp_path / 'my demo'}"
    demo = subprocess.run(
        [str(BIN), "demo", "--sessions", "100", "--store", elsewhere],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    check = subprocess.run(
        [str(BIN), "check"], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert check.returncode == 3
    assert f"`memory-watchdog demo` wrote its own: add --store '{elsewhere}'" in check.stderr


def fake_distribution(site: Path) -> None:
    """A real dist-info of the file-events `watchdog` 6.0.0, whose RECORD owns `watchdog/...`."""
    info = site / "watchdog-6.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: watchdog\nVersion: 6.0.0\n", encoding="utf-8"
    )
    (info / "RECORD").write_text(
        "watchdog/__init__.py,,\n"
        "watchdog/observers/__init__.py,,\n"
        "watchdog-6.0.0.dist-info/METADATA,,\n"
        "watchdog-6.0.0.dist-info/RECORD,,\n",
        encoding="utf-8",
    )


WARNING = (
    "memory-watchdog: warning: watchdog 6.0.0 is installed here too and owns files in the same"
    " `watchdog` package directory: installing or uninstalling either one changes the other;"
    " install memory-watchdog in an environment of its own (pipx install, uv tool install)"
)


@pytest.mark.parametrize("args", [("--version",), ("config", "check", "--no-store")])
def test_another_distribution_in_the_watchdog_package_is_warned_of(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """With the file-events `watchdog` installed beside it: one warning line on stderr, the
    command's own output and exit code unchanged; without it, no warning."""
    site = tmp_path / "site"
    fake_distribution(site)
    env = clean_env(tmp_path / "xdg")
    clean = subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    shared = subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(site)},
        check=False,
    )
    assert clean.returncode == shared.returncode == 0, shared.stderr
    assert "warning" not in clean.stderr
    assert shared.stderr.splitlines() == [WARNING, *clean.stderr.splitlines()]
    assert shared.stdout == clean.stdout
