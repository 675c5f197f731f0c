"""The docs: every example output is what the program prints, every link stays in the repo.

The examples are produced once per change of the code and docs, for every worker
(`tests.docs_examples.produced_once`: one demo store, every marked command in order, kept
under .cache/docs-examples/); `make docs` rewrites those that changed.
"""

from __future__ import annotations

import re

import pytest

from tests.docs_examples import (
    DOCS,
    MARKER,
    REPO,
    Block,
    collect,
    difference,
    produced_once,
    same,
)

# One worker regenerates the examples for the whole module (pytest -n ... --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]

EXAMPLES = [b for b in collect() if b.kind in ("example", "include")]

# [text](target) and ![alt](target), outside code.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCED = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_CITED_TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
_MARKER_START = re.compile(r"^\s*<!--\s*(example|run|file|include)\b")


def _prose(text: str) -> str:
    """`text` without fenced blocks and inline code, where links are not links."""
    return _INLINE_CODE.sub("", _FENCED.sub("", text))


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown text (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _HEADING.findall(_FENCED.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _broken_links(doc: str) -> list[str]:
    path = REPO / doc
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(_prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(REPO):
            broken.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in _anchors(resolved.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    return broken


# Session-scoped: with --dist loadgroup a worker may run other modules' tests between this
# module's, and a module fixture would then regenerate every example again (4 x 130 s seen).
# Produced once per change of the code and docs, whichever worker asks first: the others wait
# for it and read what it wrote (`produced_once`), as does the next run with nothing changed.
@pytest.fixture(scope="session")
def produced() -> dict[Block, str]:
    return produced_once()


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_is_what_the_program_prints(example: Block, produced: dict[Block, str]) -> None:
    """Each marked example shows exactly what its command prints (make docs rewrites it)."""
    printed = produced[example]
    assert same(example.text, printed), (
        f"{example}: no longer what the program prints (run `make docs`):\n"
        f"{difference(example, printed)}"
    )


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve_inside_the_repository(doc: str) -> None:
    """Every relative link of the README and docs/ names a file (and heading) in the repo."""
    assert _broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS)
def test_cited_tests_exist(doc: str) -> None:
    """Every `tests/...py::test_name` the docs cite is a test function in that file."""
    text = (REPO / doc).read_text(encoding="utf-8")
    missing = [
        f"{path}::{name}"
        for path, name in sorted(set(_CITED_TEST.findall(text)))
        if not (REPO / path).exists()
        or not re.search(rf"^\s*def {name}\(", (REPO / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []


def test_every_doc_is_checked() -> None:
    """Every Markdown page under docs/ is in DOCS, so its examples and links are checked."""
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert pages - set(DOCS) == set()


@pytest.mark.parametrize("doc", DOCS)
def test_every_marker_comment_parses(doc: str) -> None:
    """A comment that starts like a marker is one (a typo would silently drop an example)."""
    text = _FENCED.sub("", (REPO / doc).read_text(encoding="utf-8"))
    starts = [line for line in text.splitlines() if _MARKER_START.match(line)]
    assert [line for line in starts if not MARKER.match(line)] == []
