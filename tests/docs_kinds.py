"""The check kinds' names in the docs, written from the registry (`make docs`).

Where a page lists the kinds, the list stands between two comments, and
`make docs` writes it from `checks.kinds.KINDS`:

    <!-- kinds: all -->`coverage`, `freshness`, ...<!-- /kinds -->
    <!-- kinds: declarable -->`coverage`, ...<!-- /kinds -->

`all` is every registered kind, `declarable` those `[[checks.custom]]` can
declare. `make lint` fails while a list disagrees with the registry, or
while a page names every kind outside such a list (tests/lints/docs.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from checks.kinds import KINDS
from checks.kinds.base import AnyKind, Declared

SPAN = re.compile(r"<!-- kinds: (all|declarable) -->(.*?)<!-- /kinds -->", re.DOTALL)


def kind_lists(kinds: Iterable[AnyKind] = KINDS) -> dict[str, str]:
    """Each list's text: the names in backticks, in the registry's order."""
    registered = list(kinds)
    return {
        "all": ", ".join(f"`{k.name}`" for k in registered),
        "declarable": ", ".join(f"`{k.name}`" for k in registered if isinstance(k, Declared)),
    }


def written(text: str, lists: dict[str, str] | None = None) -> str:
    """`text` with every kinds list written from the registry."""
    found = lists or kind_lists()
    return SPAN.sub(lambda m: f"<!-- kinds: {m[1]} -->{found[m[1]]}<!-- /kinds -->", text)


def stale(paths: Iterable[Path]) -> Iterator[Path]:
    """The pages whose kinds lists disagree with the registry."""
    lists = kind_lists()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if written(text, lists) != text:
            yield path


def rewrite(paths: Iterable[Path]) -> list[Path]:
    """Write every page's kinds lists from the registry; the pages changed."""
    changed = list(stale(paths))
    for path in changed:
        path.write_text(written(path.read_text(encoding="utf-8")), encoding="utf-8")
    return changed


def unlisted(text: str, kinds: Iterable[AnyKind] = KINDS) -> list[int]:
    """Lines (1-based) outside a kinds list that, with the next two, name every declarable
    kind: a list written by hand, which nothing would keep up to date."""
    names = [k.name for k in kinds if isinstance(k, Declared)]
    lines = SPAN.sub(lambda m: "\n" * m[0].count("\n"), text).split("\n")
    found = []
    for i in range(len(lines)):
        chunk = " ".join(lines[i : i + 3])
        if all(re.search(rf"\b{name}\b", chunk) for name in names) and any(
            re.search(rf"\b{name}\b", lines[i]) for name in names
        ):
            found.append(i + 1)
    return found
