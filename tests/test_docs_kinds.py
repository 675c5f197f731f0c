"""The docs' lists of check kinds are the registry's (tests/docs_kinds.py, `make docs`)."""

from __future__ import annotations

import pytest

from checks.kinds import KINDS
from checks.kinds.base import Declared
from tests.docs_examples import DOCS, REPO
from tests.docs_kinds import kind_lists, stale, unlisted, written


def test_a_list_is_written_from_the_registry() -> None:
    """The text between the markers becomes the registered names, in backticks."""
    text = "kinds (<!-- kinds: declarable -->`old`<!-- /kinds -->) and more"
    names = [k.name for k in KINDS if isinstance(k, Declared)]
    assert written(text) == (
        "kinds (<!-- kinds: declarable -->"
        + ", ".join(f"`{n}`" for n in names)
        + "<!-- /kinds -->) and more"
    )
    assert "`deviation_contract`" in kind_lists()["all"]
    assert "`deviation_contract`" not in kind_lists()["declarable"]


def test_every_kinds_list_in_the_docs_is_the_registrys() -> None:
    """No page lists kinds the registry does not hold, or misses one it does (make docs)."""
    assert [str(p.relative_to(REPO)) for p in stale(REPO / doc for doc in DOCS)] == []


def test_the_docs_list_the_kinds_somewhere() -> None:
    """The lists exist: at least the spec, alerts and architecture pages hold one."""
    holding = {doc for doc in DOCS if "<!-- kinds: " in (REPO / doc).read_text(encoding="utf-8")}
    assert {"docs/spec.md", "docs/alerts.md", "docs/architecture.md"} <= holding


@pytest.mark.parametrize("doc", DOCS)
def test_no_page_lists_the_kinds_by_hand(doc: str) -> None:
    """A page naming every declarable kind does it in a generated list, not in prose."""
    assert unlisted((REPO / doc).read_text(encoding="utf-8")) == []
