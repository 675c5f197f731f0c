"""Where the tests may write: a HOME and XDG directories per test, and a fence around them.

`memory-watchdog` keeps its default store and its `last-demo-store` pointer under the user's
data directory (`$XDG_DATA_HOME`, else `~/.local/share`); a test that runs it with the user's
HOME would point the user's next command at a pytest folder. So every test runs under a
`Home` of its own (tests/conftest.py sets its variables for the test and the processes it
starts), and the test process runs under a `Fence`: the same variables, pointing into a
directory nothing may write to. Whatever honours HOME or XDG and escapes a test's own
directories (a process started by a module-wide fixture, an environment built from the fence)
lands there, and the test it happened in fails naming the paths.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The variable, and the directory under a Home's root it points to.
VARIABLES = {
    "HOME": "home",
    "XDG_DATA_HOME": "data",
    "XDG_CONFIG_HOME": "config",
    "XDG_CACHE_HOME": "cache",
    "XDG_STATE_HOME": "state",
}


@dataclass(frozen=True)
class Home:
    """A HOME and the four XDG base directories, each an empty directory under `root`."""

    root: Path

    @classmethod
    def under(cls, root: Path) -> Home:
        for name in VARIABLES.values():
            (root / name).mkdir(parents=True, exist_ok=True)
        return cls(root)

    def env(self) -> dict[str, str]:
        """The variables pointing here."""
        return {variable: str(self.root / name) for variable, name in VARIABLES.items()}

    def written(self) -> list[Path]:
        """Every file or directory under the root but the empty ones `under` made, sorted."""
        made = {self.root / name for name in VARIABLES.values()}
        return sorted(p for p in self.root.rglob("*") if p not in made)

    def clear(self) -> None:
        """Back to the empty directories `under` made."""
        for name in VARIABLES.values():
            shutil.rmtree(self.root / name, ignore_errors=True)
        Home.under(self.root)


@dataclass
class Fence:
    """The HOME and XDG directories of the test process itself: nothing may write there."""

    home: Home
    saved: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def make(cls) -> Fence:
        return cls(Home.under(Path(tempfile.mkdtemp(prefix="memory-watchdog-tests-fence-"))))

    def enter(self) -> None:
        """Point this process's variables (and so its children's) at the fence."""
        self.saved = {variable: os.environ.get(variable) for variable in VARIABLES}
        os.environ.update(self.home.env())

    def leave(self) -> None:
        """The variables as they were, and the fence removed."""
        for variable, value in self.saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        shutil.rmtree(self.home.root, ignore_errors=True)

    def check(self, test: str) -> None:
        """Fail `test` naming what was written in the fence since the last check (then
        cleared, so the next test is judged on its own)."""
        found = self.home.written()
        if not found:
            return
        self.home.clear()
        shown = ", ".join(str(p.relative_to(self.home.root)) for p in found[:10])
        more = f" and {len(found) - 10} more" if len(found) > 10 else ""
        pytest.fail(
            f"{test}, or a fixture it set up, wrote outside its own HOME and XDG directories,"
            f" where the user's files would be: {shown}{more} (give the process it started the"
            " test's environment: os.environ, or tests.process_env.clean_env)",
            pytrace=False,
        )
