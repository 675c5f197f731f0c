"""The lints of module docstrings: each says what its module is in one paragraph and links the
docs page (and section) that explains it, which exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.lints.base import Problem, Tree
from tests.lints.docs import anchors

_DOC_LINK = re.compile(r"(docs/[\w-]+\.md)(?:#([\w-]+))?")


def _docstring(tree: Tree, module: str) -> str:
    return ast.get_docstring(ast.parse(tree.text(module))) or ""


def _only_reexports(module: ast.Module) -> bool:
    """A package's `__init__` with nothing of its own: a docstring, imports and `__all__`."""
    for node in module.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        return False
    return True


def documented(tree: Tree) -> Iterator[str]:
    """The modules of watchdog/, checks/ and alerts/ whose docstring must say what they are and
    link the docs: all but `__main__.py` (one call) and the `__init__.py`s that only re-export
    (or are empty)."""
    for module in tree.modules():
        name = Path(module).name
        if name == "__main__.py":
            continue
        if name == "__init__.py" and _only_reexports(ast.parse(tree.text(module))):
            continue
        yield module


def links_resolve(tree: Tree) -> Iterator[Problem]:
    """A module's docstring that points at the docs points at a page and a heading that exist."""
    headings: dict[str, set[str]] = {}
    for module in tree.modules():
        for page, anchor in _DOC_LINK.findall(_docstring(tree, module)):
            if not (tree.root / page).is_file():
                yield Problem(module, f"its docstring links {page}, which does not exist")
                continue
            if page not in headings:
                headings[page] = anchors(tree.text(page))
            if anchor and anchor not in headings[page]:
                yield Problem(module, f"its docstring links {page}#{anchor}: no such heading")


def links_the_docs(tree: Tree) -> Iterator[Problem]:
    """Each module's docstring links the doc page (best, its section) that explains it."""
    for module in documented(tree):
        if not _DOC_LINK.search(_docstring(tree, module)):
            yield Problem(module, "its docstring links no doc page; add docs/<page>.md#<section>")


def one_paragraph(tree: Tree) -> Iterator[Problem]:
    """A module's docstring is its first line and at most one paragraph; the rest is elsewhere."""
    for module in documented(tree):
        paragraphs = [p for p in re.split(r"\n\s*\n", _docstring(tree, module)) if p.strip()]
        if len(paragraphs) > 2:
            yield Problem(
                module,
                f"its docstring has {len(paragraphs)} paragraphs; keep a first line and one"
                " paragraph, and move the detail to the docs it links or to the function or"
                " class it belongs to",
            )
