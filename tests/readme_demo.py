"""The README's path after `make demo`, in a fresh shell of a new user, built once per worker.

`after_make_demo` runs, in a fresh HOME (no XDG_DATA_HOME, memory-watchdog not on PATH), what
`make demo` runs, then the README's "After `make demo`" block (its demo included), and keeps
that HOME as a template with both outputs. A test that starts after that point works on a
copy of its own (`copy_of`), so that its commands find the state the user's would, and no
other test sees what they change. The modules that use it put those tests in one
`xdist_group` ("readme-demo"), so that the template is built once.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.process_env import clean_env

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
MAKE_DEMO = ".venv/bin/memory-watchdog demo --sessions 100"  # what `make demo` runs

# The tests that start from `after_make_demo`: one worker, so one template.
GROUP = pytest.mark.xdist_group("readme-demo")


def shell_of_a_new_user(home: Path) -> dict[str, str]:
    """A fresh HOME, no XDG_DATA_HOME, and memory-watchdog not on PATH."""
    env = clean_env(home / "unused")
    del env["XDG_DATA_HOME"]
    env["HOME"] = str(home)
    env.pop("VIRTUAL_ENV", None)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != BIN.parent]
    env["PATH"] = os.pathsep.join(path)
    return env


def bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
        check=False,
    )


def readme_block_after(heading: str) -> str:
    """The first ```sh block after `heading` in the README."""
    after = README[README.index(heading) :]
    found = re.search(r"```sh\n(.*?)```", after, re.S)
    assert found is not None
    return found.group(1)


def readme_example(command: str) -> str:
    """What the README shows `command` printing (its example block, without the `$` line)."""
    found = re.search(
        rf"<!-- example: {re.escape(command)} -->\n```text\n\$ [^\n]*\n(.*?)```", README, re.S
    )
    assert found is not None
    return found.group(1)


# The README's block after `make demo`, and the same block without its demo line: the shell
# the user has once the block ran (memory-watchdog on PATH, WATCHDOG_STORE_URL exported).
SETUP = readme_block_after("### After `make demo`")
SHELL = "\n".join(ln for ln in SETUP.splitlines() if not ln.startswith("memory-watchdog demo"))


@dataclass(frozen=True)
class AfterMakeDemo:
    """A user's HOME after `make demo` and the README's block, and what each printed."""

    home: Path
    on_path_before: subprocess.CompletedProcess[str]  # `command -v memory-watchdog`, first
    make_demo: subprocess.CompletedProcess[str]
    readme_block: subprocess.CompletedProcess[str]


_built: dict[str, AfterMakeDemo] = {}


def after_make_demo(factory: pytest.TempPathFactory) -> AfterMakeDemo:
    """The template, built on the first call in this worker (kept for the session)."""
    if "template" not in _built:
        home = factory.mktemp("after-make-demo") / "home"
        env = shell_of_a_new_user(home)
        on_path = bash("command -v memory-watchdog", env)
        make_demo = bash(MAKE_DEMO, env)
        assert make_demo.returncode == 0, make_demo.stderr
        block = bash(SETUP, env)
        assert block.returncode == 0, block.stderr
        _built["template"] = AfterMakeDemo(home, on_path, make_demo, block)
    return _built["template"]


def copy_of(template: AfterMakeDemo, home: Path) -> dict[str, str]:
    """The template's HOME copied to `home`, and the environment of a shell there.

    The files there that name a path of the template's HOME (the demo's pointer to the store
    it filled last, the HTML pages' reproduce lines; the store holds none) name it in `home`,
    as the same commands run there would have written them."""
    shutil.copytree(template.home, home, symlinks=True)
    for path in naming(home, template.home):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(str(template.home), str(home)), encoding="utf-8")
    return shell_of_a_new_user(home)


def naming(root: Path, path: Path) -> list[Path]:
    """The files under `root` whose bytes hold `path`."""
    needle = str(path).encode()
    return sorted(p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())
