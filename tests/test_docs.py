"""The docs: every example output is what the program prints.

The examples are produced once per change of the code and docs, for every worker
(`tests.docs_examples.produced_once`: one demo store, every marked command in order, kept
under .cache/docs-examples/); `make docs` rewrites those that changed. Their links, markers and
citations are static lints of `make lint` (tests/lints/docs.py).
"""

from __future__ import annotations

import pytest

from tests.docs_examples import Block, collect, difference, produced_once, same

# One worker regenerates the examples for the whole module (pytest -n ... --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]

EXAMPLES = [b for b in collect() if b.kind in ("example", "include")]


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
