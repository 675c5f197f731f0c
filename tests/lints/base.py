"""What a lint reads and what it reports: a `Tree` of files in, one `Problem` per fault out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.docs_examples import DOCS, REPO

# The packages of the program; the module size lint also reads tests/ and benchmarks/.
PACKAGES = ("watchdog", "checks", "alerts")


@dataclass(frozen=True)
class Tree:
    """A repository the lints read: its root and its documents, in the order of `DOCS`
    (a test hands in a small tree of its own under tmp_path)."""

    root: Path = REPO
    docs: tuple[str, ...] = DOCS

    def text(self, path: str | Path) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def modules(self, packages: Iterable[str] = PACKAGES) -> Iterator[str]:
        """Every `.py` file of these packages, relative to the root, sorted."""
        for package in packages:
            found = (self.root / package).rglob("*.py")
            yield from sorted(str(path.relative_to(self.root)) for path in found)


@dataclass(frozen=True)
class Problem:
    """One fault: where it is (`path` or `path:line`) and what to do about it."""

    where: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}: {self.fix}"


Lint = Callable[[Tree], Iterable[Problem]]


def line_of(text: str, offset: int) -> int:
    """The 1-based line of a character offset."""
    return text.count("\n", 0, offset) + 1
