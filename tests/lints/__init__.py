"""The static lints of the source and docs, run once by `make lint` (`python -m tests.lints`).

Each lint reads files and never runs the program or a store: links and citations in the docs,
module docstrings, module size, the import graph, where files are written durably and cron
lines parsed, asserts in the registries. Each names the file (and line) to fix, one line a
fault, and tests/test_lints.py shows each one failing on a bad tree of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

from tests.lints import docs, docstrings, imports, source
from tests.lints.base import Lint, Problem, Tree

__all__ = ["LINTS", "Lint", "Problem", "Tree", "run"]

# name -> lint, in the order they run and report.
LINTS: dict[str, Lint] = {
    "doc-links": docs.links,
    "doc-markers": docs.markers,
    "docs-listed": docs.docs_listed,
    "cited-tests": docs.cited_tests,
    "cited-names": docs.cited_names,
    "cited-paths": docs.cited_paths,
    "kinds-lists": docs.kinds_lists,
    "kinds-lists-present": docs.kinds_lists_present,
    "kinds-by-hand": docs.kinds_by_hand,
    "docstring-links-resolve": docstrings.links_resolve,
    "docstring-links-the-docs": docstrings.links_the_docs,
    "docstring-one-paragraph": docstrings.one_paragraph,
    "module-size": source.module_size,
    "import-cycles": imports.import_cycles,
    "durable-writes": source.durable_writes,
    "cron-parser": source.cron_parser,
    "registry-asserts": source.registry_asserts,
}


def run(lints: Mapping[str, Lint], tree: Tree, out: TextIO) -> int:
    """Run each lint over `tree`, print one line per problem (`where: fix [lint]`) and a
    closing count; 1 when any lint found a problem, else 0."""
    found = 0
    for name, lint in lints.items():
        for problem in lint(tree):
            print(f"{problem} [{name}]", file=out)
            found += 1
    if found:
        print(f"tests.lints: {found} problem{'s' if found != 1 else ''}", file=out)
        return 1
    print(f"tests.lints: {len(lints)} lint{'s' if len(lints) != 1 else ''}, no problem", file=out)
    return 0
