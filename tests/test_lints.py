"""Each static lint of `make lint` (tests/lints/) fails on a bad tree of its own, naming the file.

The lints run once, over the repository, in `make lint`; here each one runs on a small tree
under tmp_path that breaks its rule, so that a lint which can no longer fail fails here.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from checks.kinds import KINDS
from checks.kinds.base import Declared
from tests.lints import LINTS, Problem, Tree, run
from tests.lints.imports import cycles, import_graph

DECLARABLE = " ".join(f"`{k.name}`" for k in KINDS if isinstance(k, Declared))
TYPE_CHECKING_IMPORT = (
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from checks.b import B\n"
)


@dataclass(frozen=True)
class Bad:
    """A tree that breaks one lint's rule, and the problem the lint must report."""

    files: dict[str, str]
    where: str  # the problem's `path` or `path:line`
    says: str  # a phrase of what to fix
    docs: tuple[str, ...] = ("README.md",)


BAD = {
    "doc-links": Bad(
        {"README.md": "# Readme\n\n```\n[in code](nowhere.md)\n```\nSee [it](docs/gone.md).\n"},
        "README.md:6",
        "the link docs/gone.md names no file",
    ),
    "doc-markers": Bad(
        {"README.md": "# Readme\n\n<!-- example memory-watchdog check -->\n"},
        "README.md:3",
        "does not parse",
    ),
    "docs-listed": Bad({"docs/new.md": "# New\n"}, "docs/new.md", "tests.docs_examples.DOCS"),
    "cited-tests": Bad(
        {
            "README.md": "# Readme\n\nAs `tests/test_x.py::test_gone` shows.\n",
            "tests/test_x.py": "def test_there() -> None:\n    pass\n",
        },
        "README.md:3",
        "cites tests/test_x.py::test_gone",
    ),
    "cited-names": Bad(
        {"README.md": "`alerts.lease_ttl` is a key; `watchdog.core.errors.NoSuchError` is not.\n"},
        "README.md:1",
        "cites watchdog.core.errors.NoSuchError, which does not exist",
    ),
    "cited-paths": Bad(
        {"README.md": "# Readme\n\nIn `checks/kinds/gone.py`.\n"},
        "README.md:3",
        "names checks/kinds/gone.py",
    ),
    "kinds-lists": Bad(
        {"README.md": "# Readme\n\nKinds: <!-- kinds: all -->`old`<!-- /kinds -->.\n"},
        "README.md:3",
        "not the registry's",
    ),
    "kinds-lists-present": Bad(
        {"docs/spec.md": "# Spec\n", "docs/alerts.md": "# Alerts\n", "docs/architecture.md": "#\n"},
        "docs/spec.md",
        "holds no generated list",
        docs=("docs/spec.md", "docs/alerts.md", "docs/architecture.md"),
    ),
    "kinds-by-hand": Bad(
        {"README.md": f"# Readme\n\nThe kinds are {DECLARABLE}.\n"},
        "README.md:3",
        "names every declarable kind by hand",
    ),
    "docstring-links-resolve": Bad(
        {
            "docs/alerts.md": "# Alerts\n\n## Delivery\n",
            "alerts/x.py": '"""X, as docs/alerts.md#no-such-heading says."""\n',
        },
        "alerts/x.py",
        "docs/alerts.md#no-such-heading: no such heading",
    ),
    "docstring-links-the-docs": Bad(
        {"checks/x.py": '"""X, linking nothing."""\n'}, "checks/x.py", "links no doc page"
    ),
    "docstring-one-paragraph": Bad(
        {"watchdog/x.py": '"""X.\n\nOne paragraph.\n\nAnd another (docs/a.md)."""\n'},
        "watchdog/x.py",
        "has 3 paragraphs",
    ),
    "module-size": Bad({"tests/big.py": "x = 1\n" * 801}, "tests/big.py", "801 lines, over 800"),
    "import-cycles": Bad(
        {
            "checks/__init__.py": "",
            "checks/a.py": TYPE_CHECKING_IMPORT,
            "checks/b.py": "def f():\n    from . import a\n",
        },
        "checks/a.py",
        "cycle (checks.a, checks.b)",
    ),
    "durable-writes": Bad(
        {"alerts/x.py": "import tempfile\nf = tempfile.NamedTemporaryFile()\n"},
        "alerts/x.py",
        "temporary file of its own",
    ),
    "cron-parser": Bad(
        {"checks/y.py": "from apscheduler.triggers.cron import CronTrigger\n"},
        "checks/y.py",
        "parses a cron line itself",
    ),
    "registry-asserts": Bad(
        {"checks/builtin.py": "BUILTINS = {}\nassert BUILTINS == {}\n"},
        "checks/builtin.py:2",
        "an assert guards a registry",
    ),
}


def laid_out(root: Path, files: dict[str, str]) -> None:
    for name, text in {"README.md": "# Readme\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_every_lint_has_a_bad_case() -> None:
    """A lint registered without a tree that breaks it could be one that cannot fail."""
    assert sorted(BAD) == sorted(LINTS)


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_lint_names_the_file_of_its_bad_case(name: str, tmp_path: Path) -> None:
    """On a tree that breaks its rule, the lint reports the file (and line) and what to fix."""
    bad = BAD[name]
    laid_out(tmp_path, bad.files)
    problems = list(LINTS[name](Tree(tmp_path, bad.docs)))
    assert any(p.where == bad.where and bad.says in p.fix for p in problems), problems


def test_code_and_config_keys_are_not_links_or_citations(tmp_path: Path) -> None:
    """A link inside a fenced block and a dotted config key are prose, not faults."""
    laid_out(tmp_path, {"README.md": "```\n[x](gone.md)\n```\n`alerts.lease_ttl`, `x/y`\n"})
    tree = Tree(tmp_path, ("README.md",))
    assert [*LINTS["doc-links"](tree), *LINTS["cited-names"](tree)] == []


def test_the_graph_sees_imports_made_only_for_types(tmp_path: Path) -> None:
    """The scan itself: an import under TYPE_CHECKING or in a function is an edge too."""
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "__init__.py").write_text("")
    (tmp_path / "checks" / "a.py").write_text(TYPE_CHECKING_IMPORT)
    (tmp_path / "checks" / "b.py").write_text("def f():\n    from . import a\n")
    assert cycles(import_graph(tmp_path)) == [["checks.a", "checks.b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_run_prints_one_line_a_problem_and_fails(tmp_path: Path) -> None:
    """`python -m tests.lints` prints `where: fix [lint]` per problem, a count, and exits 1."""
    laid_out(tmp_path, {**BAD["module-size"].files, **BAD["cited-paths"].files})
    out = io.StringIO()
    chosen = {name: LINTS[name] for name in ("cited-paths", "module-size")}
    assert run(chosen, Tree(tmp_path, ("README.md",)), out) == 1
    assert out.getvalue().splitlines() == [
        "README.md:3: names checks/kinds/gone.py, which does not exist; fix the path [cited-paths]",
        "tests/big.py: 801 lines, over 800; split it where its concerns part"
        " (docs/development.md#the-layers-lint-imports) [module-size]",
        "tests.lints: 2 problems",
    ]


def test_a_clean_run_says_so_and_passes(tmp_path: Path) -> None:
    """With nothing to report, the run says how many lints ran and exits 0."""
    laid_out(tmp_path, {"tests/small.py": "x = 1\n"})
    out = io.StringIO()
    assert run({"module-size": LINTS["module-size"]}, Tree(tmp_path, ("README.md",)), out) == 0
    assert out.getvalue() == "tests.lints: 1 lint, no problem\n"


def test_a_problem_reads_as_where_then_what_to_fix() -> None:
    """One line: the file (and line), then what to do."""
    assert str(Problem("docs/a.md:3", "fix it")) == "docs/a.md:3: fix it"
