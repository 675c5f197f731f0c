"""Every Python module of the project, tests and benchmarks included, stays at most 800 lines: a
guard against the god module, not a size to split at (a module is split where its concerns part,
never for its length; docs/development.md#the-layers-lint-imports)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("watchdog", "checks", "alerts", "tests", "benchmarks")
MAX_LINES = 800


def test_no_module_is_over_800_lines() -> None:
    modules = [path for package in PACKAGES for path in (REPO / package).rglob("*.py")]
    assert len(modules) > 100  # the tree was found
    over = {
        str(path.relative_to(REPO)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert over == {}
