"""The registries' consistency is checked by code that `python -O` keeps.

An `assert` vanishes under `-O` (and PYTHONOPTIMIZE): a registry guarded by one would then
judge a check with another kind's parameters, or build a preset nobody defined. Each case
here runs in a child `python -O` on an inconsistent registry and must fail loudly, naming it;
that the registries' modules hold no `assert` at all is a lint of `make lint` (tests/lints/source.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Every test runs a child `python -O`: left out of make test-fast.
pytestmark = pytest.mark.slow

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
    "a built-in check registered without its builder": (
        "from dataclasses import dataclass\n"
        "from checks.builtin import configured_checks\n"
        "from watchdog.core.units import Unit\n"
        "from watchdog.runner.plugins import PLUGINS, default_settings\n"
        "@dataclass(frozen=True)\n"
        "class Ghost:\n"
        "    id: str = 'ghost'\n"
        "    unit: Unit = Unit.COUNT\n"
        "    kind: str = 'coverage'\n"
        "configured_checks(default_settings(PLUGINS.with_(checks=[Ghost()])))",
        "built-in check 'ghost' is registered without its builder",
    ),
    "a preset registered without its builder": (
        "from dataclasses import dataclass\n"
        "from checks.sources import preset_for\n"
        "from watchdog.core.settings import settings_from_mapping\n"
        "from watchdog.runner.plugins import PLUGINS\n"
        "@dataclass(frozen=True)\n"
        "class Ghost:\n"
        "    name: str = 'ghost'\n"
        "    table: str = 'x.y'\n"
        "    signal: None = None\n"
        "plugins = PLUGINS.with_(presets=[Ghost()])\n"
        "s = settings_from_mapping({'source': {'preset': 'ghost'}}, plugins=plugins, env={})\n"
        "preset_for(s.source, None)",
        "preset 'ghost' is registered without its builder",
    ),
    "a receiver kind registered without its sender": (
        "from dataclasses import dataclass\n"
        "from typing import ClassVar\n"
        "from alerts.notifiers import build_notifiers\n"
        "from watchdog.core.settings import ReceiverModel, settings_from_mapping\n"
        "from watchdog.runner.plugins import PLUGINS\n"
        "class GhostSettings(ReceiverModel):\n"
        "    kind: ClassVar[str] = 'ghost'\n"
        "@dataclass(frozen=True)\n"
        "class Ghost:\n"
        "    model: type = GhostSettings\n"
        "plugins = PLUGINS.with_(receivers=[Ghost()])\n"
        "s = settings_from_mapping({'alerts': {'ghost': {'a': {}}}}, plugins=plugins, env={})\n"
        "build_notifiers(s)",
        "receiver kind 'ghost' is not registered with a sender",
    ),
    "a plugin registered twice": (
        "from checks.kinds import KINDS\n"
        "from watchdog.runner.plugins import PLUGINS\n"
        "PLUGINS.with_(kinds=[KINDS[0]])",
        "is registered twice",
    ),
    "a custom table of a kind config cannot declare": (
        "from checks.kinds import spec_of\n"
        "from checks.kinds.deviation_evidence import KIND\n"
        "from watchdog.core.settings.custom import CustomCheck\n"
        "from watchdog.runner.plugins import PLUGINS\n"
        "spec_of(PLUGINS, CustomCheck(id='x', kind=KIND.name, target=0))",
        "kind 'deviation_evidence' is not declarable",
    ),
    "a check judged by another kind": (
        "from checks.builtin import configured_checks\n"
        "from checks.kinds.share import KIND\n"
        "from watchdog.runner.plugins import default_settings\n"
        "KIND.of(configured_checks(default_settings())[0])",
        "check recall_coverage is no share check",
    ),
    "a check built without its kind": (
        "from dataclasses import replace\n"
        "from checks.builtin import configured_checks\n"
        "from checks.kinds import kind_of\n"
        "from watchdog.runner.plugins import default_settings\n"
        "kind_of(replace(configured_checks(default_settings())[0], kind=None))",
        "check recall_coverage has no kind",
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
