"""The registries' consistency is checked by code that `python -O` keeps.

An `assert` vanishes under `-O` (and PYTHONOPTIMIZE): a registry guarded by one would then
judge a check with another kind's parameters, or build a preset nobody defined. Each case
here runs in a child `python -O` on an inconsistent registry and must fail loudly, naming it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def under_optimize(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by `python -O` in the repository (asserts stripped)."""
    return subprocess.run(
        [sys.executable, "-O", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_the_child_really_runs_without_asserts() -> None:
    """The harness itself: under -O an assert is gone and __debug__ is False."""
    done = under_optimize("assert False; print(__debug__)")
    assert (done.returncode, done.stdout.strip()) == (0, "False")


CASES = {
    "a built-in check id without its builder": (
        "import watchdog.core.settings as s, watchdog.core.settings.model as m\n"
        "s.BUILTIN_CHECK_IDS = m.BUILTIN_CHECK_IDS = (*m.BUILTIN_CHECK_IDS, 'ghost')\n"
        "import checks.builtin",
        "built-in checks out of step",
    ),
    "a preset with facts and no builder": (
        "from watchdog.core.settings.presets import PRESETS\n"
        "PRESETS['ghost'] = PRESETS['normalized']\n"
        "import checks.sources",
        "presets out of step",
    ),
    "a receiver with settings and no notifier": (
        "import watchdog.core.settings.receivers as r\n"
        "r.RECEIVERS = {**r.RECEIVERS, 'ghost': r.RECEIVERS['webhook']}\n"
        "import watchdog.core.settings as s; s.RECEIVERS = r.RECEIVERS\n"
        "import alerts.notifiers",
        "receiver kinds out of step",
    ),
    "a custom table of a kind config cannot declare": (
        "from checks.kinds import Kinds\n"
        "from checks.kinds.deviation_evidence import KIND\n"
        "from watchdog.core.settings.custom import CustomCheck\n"
        "kinds = Kinds(); kinds.register(KIND)\n"
        "kinds.spec_of(CustomCheck(id='x', kind=KIND.name, target=0))",
        "kind 'deviation_evidence' is not declarable",
    ),
    "a check judged by another kind": (
        "from checks.builtin import BUILTIN\n"
        "from checks.kinds.share import KIND\n"
        "from watchdog.core.settings import Settings\n"
        "KIND.of(BUILTIN['recall_coverage'](Settings()))",
        "check recall_coverage is no share check",
    ),
    "a table handed to another kind": (
        "from checks.kinds.share import KIND\n"
        "from checks.kinds.freshness import FreshnessConfig\n"
        "KIND.params_of(FreshnessConfig(id='x', kind='freshness', target=1))",
        "check x: its table is no share table",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inconsistent_registry_fails_loudly_under_optimize(case: str) -> None:
    """Each inconsistency raises RegistryError naming it, asserts or not."""
    code, message = CASES[case]
    done = under_optimize(code)
    assert done.returncode != 0, done.stdout
    assert "RegistryError" in done.stderr, done.stderr
    assert message in done.stderr, done.stderr


REGISTRY_MODULES = [
    "checks/kinds/__init__.py",
    "checks/kinds/base.py",
    "checks/builtin.py",
    "checks/sources.py",
    "alerts/notifiers.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "watchdog/core/settings").glob("*.py")),
]


def test_no_assert_guards_a_registry() -> None:
    """The registries' modules hold no `assert` statement at all."""
    found = [
        f"{path}:{node.lineno}"
        for path in REGISTRY_MODULES
        for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8")))
        if isinstance(node, ast.Assert)
    ]
    assert found == []
