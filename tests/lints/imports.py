"""No two modules know each other: the import graph of our packages has no cycle.

Every import counts: at the top, under `TYPE_CHECKING`, inside a function. `lint-imports`
holds the layers; this holds the modules within a layer (a shared piece moves down, or
the caller passes it in, as `watchdog.daemon.serving.Served` takes the daemon).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.lints.base import PACKAGES, Problem, Tree


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports (any import, anywhere in it)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        graph[name].add(target)
                    elif base in modules:
                        graph[name].add(base)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_cycles(tree: Tree) -> Iterator[Problem]:
    """No module imports one that imports it back, directly or through others."""
    modules = _modules(tree.root)
    for cycle in cycles(import_graph(tree.root)):
        yield Problem(
            str(modules[cycle[0]].relative_to(tree.root)),
            f"its imports form a cycle ({', '.join(cycle)}); move what they share down a"
            " layer, or have the caller pass it in",
        )
