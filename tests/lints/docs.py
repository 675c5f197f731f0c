"""The lints of the README and docs/: links, cited code, cited tests, markers, the kinds lists.

Each reads the documents of a `Tree` and names the line to fix; none runs the program
(the examples' outputs are tests/test_docs.py's, in pytest).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator

from tests.docs_examples import MARKER
from tests.docs_kinds import SPAN, kind_lists, unlisted
from tests.lints.base import Problem, Tree, line_of

# [text](target) and ![alt](target), outside code.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCED = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_CITED_TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
_MARKER_START = re.compile(r"^\s*<!--\s*(example|run|file|include)\b")
_DOTTED = re.compile(
    r"`((?:watchdog|checks|alerts|benchmarks|tests)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`"
)
_PATH = re.compile(
    r"`((?:watchdog|checks|alerts|tests|benchmarks|config|docs)/[\w./-]*[\w])(?:::\w+)?`"
)
# The pages that must hold a generated kinds list (at least these).
KINDS_PAGES = ("docs/spec.md", "docs/alerts.md", "docs/architecture.md")


def _unfenced(text: str) -> str:
    """`text` with its fenced blocks blanked, line numbers kept."""
    return _FENCED.sub(lambda m: "\n" * m[0].count("\n"), text)


def _prose(text: str) -> str:
    """`text` without fenced blocks and inline code, where links are not links (lines kept)."""
    return _INLINE_CODE.sub("", _unfenced(text))


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown text (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCED.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(tree: Tree) -> Iterator[Problem]:
    """Every relative link of the README and docs/ names a file (and heading) in the repo."""
    root = tree.root.resolve()
    for doc in tree.docs:
        path = root / doc
        text = path.read_text(encoding="utf-8")
        prose = _prose(text)
        for match in _LINK.finditer(prose):
            target = match[1]
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{doc}:{line_of(prose, match.start())}"
            if not resolved.is_relative_to(root):
                yield Problem(where, f"the link {target} leaves the repository; link a file in it")
            elif not resolved.exists():
                yield Problem(where, f"the link {target} names no file; fix the link")
            elif (
                anchor
                and resolved.suffix == ".md"
                and anchor not in anchors(resolved.read_text(encoding="utf-8"))
            ):
                page = resolved.relative_to(root)
                yield Problem(where, f"the link {target}: {page} has no heading #{anchor}")


def cited_tests(tree: Tree) -> Iterator[Problem]:
    """Every `tests/...py::test_name` the docs cite is a test function in that file."""
    for doc in tree.docs:
        text = tree.text(doc)
        for match in _CITED_TEST.finditer(text):
            path, name = match[1], match[2]
            there = (tree.root / path).exists() and re.search(
                rf"^\s*def {name}\(", tree.text(path), re.M
            )
            if not there:
                yield Problem(
                    f"{doc}:{line_of(text, match.start())}",
                    f"cites {path}::{name}, which is not a test function there;"
                    " cite the test that exists",
                )


def docs_listed(tree: Tree) -> Iterator[Problem]:
    """Every Markdown page under docs/ is in DOCS, so its examples and links are checked."""
    pages = sorted(str(p.relative_to(tree.root)) for p in (tree.root / "docs").glob("*.md"))
    for page in pages:
        if page not in tree.docs:
            yield Problem(
                page,
                "not in tests.docs_examples.DOCS: add it there, so its examples and links"
                " are checked",
            )


def markers(tree: Tree) -> Iterator[Problem]:
    """A comment that starts like a marker is one (a typo would silently drop an example)."""
    for doc in tree.docs:
        for number, line in enumerate(_unfenced(tree.text(doc)).split("\n"), start=1):
            if _MARKER_START.match(line) and not MARKER.match(line):
                yield Problem(
                    f"{doc}:{number}",
                    "a comment that starts like a marker does not parse; write it"
                    " `<!-- example|run|file|include: ARGUMENT -->` on a line of its own",
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


def cited_names(tree: Tree) -> Iterator[Problem]:
    """Each `module.NAME` a doc cites imports and has that name.

    A dotted name whose first two parts are one of our modules (`checks.kinds`) is a citation of
    code: the rest must be attributes of it. Dotted names that only start like a package (config
    keys such as `alerts.lease_ttl`, tables such as `watchdog.memory_events`) are left alone.
    """
    for doc in tree.docs:
        text = tree.text(doc)
        seen = set()
        for match in _DOTTED.finditer(text):
            name = match[1]
            if name not in seen and _unresolved(name):
                yield Problem(
                    f"{doc}:{line_of(text, match.start())}",
                    f"cites {name}, which does not exist; fix the name or the code",
                )
            seen.add(name)


def cited_paths(tree: Tree) -> Iterator[Problem]:
    """Each repository path a doc names in code (`checks/kinds/coverage.py`) is there."""
    for doc in tree.docs:
        text = tree.text(doc)
        seen = set()
        for match in _PATH.finditer(text):
            path = match[1]
            if any(c in path for c in ("<", "*", "...")) or path in seen:
                continue
            seen.add(path)
            if not (tree.root / path).exists():
                yield Problem(
                    f"{doc}:{line_of(text, match.start())}",
                    f"names {path}, which does not exist; fix the path",
                )


def kinds_lists(tree: Tree) -> Iterator[Problem]:
    """No page lists kinds the registry does not hold, or misses one it does (make docs)."""
    lists = kind_lists()
    for doc in tree.docs:
        text = tree.text(doc)
        for match in SPAN.finditer(text):
            if match[2] != lists[match[1]]:
                yield Problem(
                    f"{doc}:{line_of(text, match.start())}",
                    f"this kinds list ({match[1]}) is not the registry's (checks.kinds.KINDS);"
                    " run make docs",
                )


def kinds_lists_present(tree: Tree) -> Iterator[Problem]:
    """The lists exist: at least the spec, alerts and architecture pages hold one."""
    for page in KINDS_PAGES:
        if page not in tree.docs or "<!-- kinds: " not in tree.text(page):
            yield Problem(
                page,
                "holds no generated list of the check kinds; put"
                " `<!-- kinds: all --><!-- /kinds -->` where it names them and run make docs",
            )


def kinds_by_hand(tree: Tree) -> Iterator[Problem]:
    """A page naming every declarable kind does it in a generated list, not in prose."""
    for doc in tree.docs:
        for number in unlisted(tree.text(doc)):
            yield Problem(
                f"{doc}:{number}",
                "names every declarable kind by hand; use a generated list"
                " (`<!-- kinds: declarable --><!-- /kinds -->`, then make docs)",
            )
