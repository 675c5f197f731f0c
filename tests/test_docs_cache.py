"""The docs examples are produced once per change of their inputs, and reused by every worker."""

from __future__ import annotations

import fcntl
import json
import threading
from pathlib import Path

import pytest

from tests.docs_examples import (
    INPUT_DIRS,
    _dump,
    _load,
    cache_key,
    collect,
    produced_once,
)

README = """# A readme

<!-- example: memory-watchdog check --config config/examples/knowledge.toml -->
```text
all ok
```

<!-- include: deploy/unit.service -->
```ini
[Unit]
```
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small repository: a readme with an example and an include, code, config, docs."""
    repo = tmp_path / "repo"
    files = {
        "README.md": README,
        "docs/spec.md": "# Spec\n",
        "pyproject.toml": "[project]\nname = 'x'\n",
        "checks/kinds/coverage.py": "VALUE = 1\n",
        "watchdog/report/templates/report.html.j2": "<html>\n",
        "alerts/render.py": "X = 1\n",
        "config/examples/knowledge.toml": "[source]\n",
        "deploy/unit.service": "[Unit]\n",
        "tests/docs_cli.py": "FROZEN = 1\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    return repo


@pytest.mark.parametrize(
    "changed",
    [
        "checks/kinds/coverage.py",
        "watchdog/report/templates/report.html.j2",
        "alerts/render.py",
        "config/examples/knowledge.toml",
        "deploy/unit.service",
        "README.md",
        "docs/spec.md",
        "pyproject.toml",
        "tests/docs_cli.py",
    ],
)
def test_the_cache_key_changes_with_every_input(root: Path, changed: str) -> None:
    """The code and its templates, config a command reads, an included file, the docs, the
    project and the harness are each part of the key: a cached run never stands for a change."""
    before = cache_key(root)
    path = root / changed
    path.write_text(path.read_text() + "# changed\n")
    assert cache_key(root) != before


def test_a_new_module_changes_the_cache_key(root: Path) -> None:
    """A file added to the code (not yet in git) is an input too."""
    before = cache_key(root)
    (root / INPUT_DIRS[1] / "new.py").write_text("NEW = 1\n")
    assert cache_key(root) != before


def test_the_cache_key_ignores_bytecode(root: Path) -> None:
    """Compiled files written by running the code do not change the key."""
    before = cache_key(root)
    cached = root / "checks" / "__pycache__" / "coverage.cpython-311.pyc"
    cached.parent.mkdir()
    cached.write_bytes(b"\0")
    assert cache_key(root) == before


def _stored(root: Path, cache: Path, shown: str) -> Path:
    """A stored run for `root`'s key whose example printed `shown`."""
    blocks = [b for b in collect(root) if b.kind in ("example", "include")]
    produced = {b: (shown if b.kind == "example" else "[Unit]\n") for b in blocks}
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{cache_key(root)}.json"
    path.write_text(_dump(produced))
    return path


def test_a_run_with_nothing_changed_reuses_the_stored_outputs(root: Path, tmp_path: Path) -> None:
    """The outputs stored under the current key are read back, block for block, and no
    command runs (this root has no demo to run)."""
    cache = tmp_path / "cache"
    _stored(root, cache, "all ok\n")
    produced = produced_once(root, cache)
    assert {b.kind: text for b, text in produced.items()} == {
        "example": "all ok\n",
        "include": "[Unit]\n",
    }


def test_stored_outputs_of_other_blocks_are_not_used() -> None:
    """Outputs stored for other markers (another order, another command) do not load."""
    blocks = collect(Path(__file__).resolve().parent.parent)
    shown = [b for b in blocks if b.kind in ("example", "include")]
    stored = json.loads(_dump({b: "x" for b in shown}))
    stored[0][3] = "memory-watchdog something else"
    assert _load(json.dumps(stored), blocks) is None


@pytest.mark.slow
def test_a_worker_waits_for_the_one_producing_then_reads_what_it_wrote(
    root: Path, tmp_path: Path
) -> None:
    """While one process holds the key's lock (producing), another waits on it, then reads
    the stored run rather than producing again."""
    cache = tmp_path / "cache"
    cache.mkdir()
    found: dict[str, object] = {}
    with (cache / f"{cache_key(root)}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = threading.Thread(target=lambda: found.update(run=produced_once(root, cache)))
        waiting.start()
        waiting.join(timeout=1)
        assert waiting.is_alive()  # blocked on the lock
        _stored(root, cache, "written by the producer\n")
    waiting.join(timeout=30)
    produced = found["run"]
    assert isinstance(produced, dict)
    assert "written by the producer\n" in produced.values()
