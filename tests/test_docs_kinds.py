"""The docs' lists of check kinds are written from the registry (tests/docs_kinds.py, `make docs`).

That every page's lists are the registry's is a lint of `make lint` (tests/lints/docs.py).
"""

from __future__ import annotations

from checks.kinds import KINDS
from checks.kinds.base import Declared
from tests.docs_kinds import kind_lists, written


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
