"""The lints of the Python source: no god module, one durable write, one cron parser, and no
`assert` guarding a registry (docs/development.md#the-layers-lint-imports)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from tests.lints.base import Problem, Tree

MAX_LINES = 800
# Every package of the project, tests and benchmarks included, for the size lint.
SIZED = ("watchdog", "checks", "alerts", "tests", "benchmarks")

_TEMPORARY = re.compile(r"tempfile\.mkstemp|NamedTemporaryFile|with_suffix\(\"\.tmp\"\)")
# The fsyncs of the program: the durable write's two (the file, its directory) and the
# ingest ledger's append, which rewrites nothing.
FSYNCS = {"watchdog/core/files.py": 2, "watchdog/daemon/ingest/spool.py": 1}
CRON_PARSER = "watchdog/core/cron.py"

# The modules that hold a registry or check one (`python -O` drops an assert).
REGISTRY_MODULES = (
    "checks/kinds/__init__.py",
    "checks/kinds/base.py",
    "checks/builtin.py",
    "checks/sources.py",
    "alerts/notifiers.py",
)


def module_size(tree: Tree) -> Iterator[Problem]:
    """Every Python module of the project, tests and benchmarks included, stays at most 800
    lines: a guard against the god module, not a size to split at."""
    modules = list(tree.modules(SIZED))
    if not modules:
        yield Problem(str(tree.root), "no Python module found: the size lint read nothing")
    for module in modules:
        lines = len(tree.text(module).splitlines())
        if lines > MAX_LINES:
            yield Problem(
                module,
                f"{lines} lines, over {MAX_LINES}; split it where its concerns part"
                " (docs/development.md#the-layers-lint-imports)",
            )


def durable_writes(tree: Tree) -> Iterator[Problem]:
    """No module but watchdog/core/files.py writes a file through its own temporary; the one
    other fsync is the ingest ledger's append, which rewrites nothing."""
    sources = {module: tree.text(module) for module in tree.modules()}
    for module, text in sources.items():
        if _TEMPORARY.search(text):
            yield Problem(
                module,
                "writes through a temporary file of its own; use watchdog.core.files.write_atomic",
            )
    fsyncs = {module: text.count("os.fsync(") for module, text in sources.items()}
    for module in sorted(set(FSYNCS) | {m for m, n in fsyncs.items() if n}):
        found, expected = fsyncs.get(module, 0), FSYNCS.get(module, 0)
        if found != expected:
            yield Problem(
                module,
                f"{found} os.fsync calls where {expected} are expected; write files through"
                " watchdog.core.files.write_atomic (or update FSYNCS in tests/lints/source.py"
                " with the reason)",
            )


def cron_parser(tree: Tree) -> Iterator[Problem]:
    """APScheduler's CronTrigger is imported by watchdog/core/cron.py alone."""
    parsing = {
        module
        for module in tree.modules()
        if "apscheduler.triggers.cron" in (text := tree.text(module)) or "from_crontab" in text
    }
    for module in sorted(parsing - {CRON_PARSER}):
        yield Problem(module, "parses a cron line itself; use watchdog.core.cron.CronLine instead")
    if CRON_PARSER not in parsing:
        yield Problem(
            CRON_PARSER,
            "no longer parses cron lines with APScheduler's CronTrigger; update CRON_PARSER"
            " in tests/lints/source.py to the module that does",
        )


def registry_asserts(tree: Tree) -> Iterator[Problem]:
    """The registries' modules hold no `assert` statement at all (`python -O` drops them)."""
    settings = sorted(
        str(p.relative_to(tree.root)) for p in (tree.root / "watchdog/core/settings").glob("*.py")
    )
    for module in (*REGISTRY_MODULES, *settings):
        if not (tree.root / module).is_file():
            yield Problem(
                module,
                "a registry module that no longer exists; update REGISTRY_MODULES in"
                " tests/lints/source.py",
            )
            continue
        for node in ast.walk(ast.parse(tree.text(module))):
            if isinstance(node, ast.Assert):
                yield Problem(
                    f"{module}:{node.lineno}",
                    "an assert guards a registry and vanishes under python -O;"
                    " raise RegistryError instead",
                )
