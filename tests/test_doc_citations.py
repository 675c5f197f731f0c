"""The docs cite code that exists: every `module.NAME` resolves, every repository path is a file.

A dotted name whose first two parts are one of our modules (`checks.kinds`,
`watchdog.core.settings.load`) is a citation of code: the rest must be
attributes of it (`checks.kinds.spec_of`). Dotted names that only start
like a package (config keys such as `alerts.lease_ttl`, table names such as
`watchdog.memory_events`) are not code and are left alone.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from tests.docs_examples import DOCS, REPO
from tests.test_docs import _anchors

_DOTTED = re.compile(
    r"`((?:watchdog|checks|alerts|benchmarks|tests)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`"
)
_PATH = re.compile(
    r"`((?:watchdog|checks|alerts|tests|benchmarks|config|docs)/[\w./-]*[\w])(?:::\w+)?`"
)


def _code_citation(name: str) -> tuple[str, list[str]] | None:
    """The longest importable module of `name` (two parts at least) and the attributes after it."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        return module, parts[cut:]
    return None


def _unresolved(name: str) -> bool:
    found = _code_citation(name)
    if found is None:
        return False  # not a module of ours: a config key, a table, an attribute name
    module, attributes = found
    value: object = importlib.import_module(module)
    for attribute in attributes:
        if not hasattr(value, attribute):
            return True
        value = getattr(value, attribute)
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_module_and_name_resolves(doc: str) -> None:
    """Each `module.NAME` a doc cites imports and has that name."""
    text = (REPO / doc).read_text(encoding="utf-8")
    broken = sorted({name for name in _DOTTED.findall(text) if _unresolved(name)})
    assert not broken, f"{doc} cites code that does not exist: {broken}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_path_exists(doc: str) -> None:
    """Each repository path a doc names in code (`checks/kinds/coverage.py`) is there."""
    text = (REPO / doc).read_text(encoding="utf-8")
    cited = {p for p in _PATH.findall(text) if not any(c in p for c in ("<", "*", "..."))}
    missing = sorted(path for path in cited if not (REPO / path).exists())
    assert not missing, f"{doc} names files that do not exist: {missing}"


_DOC_LINK = re.compile(r"(docs/[\w-]+\.md)(?:#([\w-]+))?")


@cache
def anchors(page: Path) -> set[str]:
    return _anchors(page.read_text(encoding="utf-8"))


def _modules() -> list[str]:
    return sorted(
        str(path.relative_to(REPO))
        for package in ("watchdog", "checks", "alerts")
        for path in (REPO / package).rglob("*.py")
    )


@pytest.mark.parametrize("module", _modules())
def test_module_docstrings_link_to_docs_that_exist(module: str) -> None:
    """A module's docstring that points at the docs points at a page and a heading that exist."""
    docstring = ast.get_docstring(ast.parse((REPO / module).read_text(encoding="utf-8"))) or ""
    for page, anchor in _DOC_LINK.findall(docstring):
        assert (REPO / page).is_file(), f"{module}: {page} does not exist"
        if anchor:
            assert anchor in anchors(REPO / page), f"{module}: {page} has no heading #{anchor}"


def _only_reexports(tree: ast.Module) -> bool:
    """A package's `__init__` with nothing of its own: a docstring, imports and `__all__`."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        return False
    return True


def _documented_modules() -> list[str]:
    """The modules of watchdog/, checks/ and alerts/ whose docstring must say what they are and
    link the docs: all but `__main__.py` (one call) and the `__init__.py`s that only re-export (or
    are empty)."""
    chosen = []
    for module in _modules():
        path = Path(module)
        if path.name == "__main__.py":
            continue
        if path.name == "__init__.py" and _only_reexports(
            ast.parse((REPO / module).read_text(encoding="utf-8"))
        ):
            continue
        chosen.append(module)
    return chosen


def _docstring(module: str) -> str:
    return ast.get_docstring(ast.parse((REPO / module).read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("module", _documented_modules())
def test_every_module_docstring_links_the_docs(module: str) -> None:
    """Each module's docstring links the doc page (best, its section) that explains it."""
    assert _DOC_LINK.search(_docstring(module)), (
        f"{module}: its docstring links no doc page (docs/<page>.md#<section>)"
    )


@pytest.mark.parametrize("module", _documented_modules())
def test_every_module_docstring_is_a_first_line_and_one_paragraph(module: str) -> None:
    """A module's docstring is its first line and at most one paragraph; the rest is elsewhere."""
    paragraphs = [part for part in re.split(r"\n\s*\n", _docstring(module)) if part.strip()]
    assert len(paragraphs) <= 2, (
        f"{module}: its docstring has {len(paragraphs)} paragraphs; keep a first line and one"
        " paragraph, and move the detail to the docs it links or to the function or class it"
        " belongs to"
    )
