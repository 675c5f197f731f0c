"""Bound parameters (a value in, its `{name:Type}` placeholder out), literals where a definition
cannot hold a parameter (a view's), one merge of parameter sets that refuses a name bound twice
with two values, and the window's bounds.

Every figure compares times with the window's bounds `WS`, `AT`, `LB`:
columns, not parameters, so that one plan renders over one window (each
rendering defines them from the bound `ws_ms`, `at_ms`, `lb_ms`) or over
many in one pass (`checks.scans.windows`: one row per session and window,
its bounds as that row's columns). How the scans bind data values:
docs/architecture.md#a-check-kind-one-module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from watchdog.core.sql import literal

# The window's bounds in epoch milliseconds, as columns of the rows a figure reads.
WS = "_ws"  # the window's start
AT = "_at"  # its end: events at or after it do not exist
LB = "_lb"  # the start of the lookback
# One window's bounds as those columns, from the parameters every scan binds (`Window.params`).
ONE_WINDOW = "{ws_ms:Int64} AS _ws, {at_ms:Int64} AS _at, {lb_ms:Int64} AS _lb"


class Values(Protocol):
    """How a definition writes a data value: a bound placeholder, or a literal in a view."""

    def __call__(self, value: Any, type_: str) -> str: ...

    def names(self, names: tuple[str, ...] | list[str]) -> str: ...


@dataclass
class Binder:
    """The parameters of one query; each value bound once, under a name made from `prefix`."""

    prefix: str
    values: dict[str, Any] = field(default_factory=dict)
    _seen: dict[tuple[str, str], str] = field(default_factory=dict)

    def __call__(self, value: Any, type_: str) -> str:
        """The placeholder of `value` as a ClickHouse `type_` (`Int64`, `Array(String)`)."""
        key = (type_, repr(value))
        if key not in self._seen:
            name = f"{self.prefix}{len(self.values)}"
            self.values[name] = list(value) if isinstance(value, tuple) else value
            self._seen[key] = f"{{{name}:{type_}}}"
        return self._seen[key]

    def names(self, names: tuple[str, ...] | list[str]) -> str:
        """The placeholder of a list of event names (`Array(String)`)."""
        return self(tuple(names), "Array(String)")


class Literals:
    """Values written as SQL literals: what a materialized view's definition holds instead of
    parameters (it cannot hold one)."""

    def __call__(self, value: Any, type_: str) -> str:
        if type_ == "Array(String)":
            return literal([str(v) for v in value])  # typed already
        return f"CAST({literal(value)} AS {type_})"

    def names(self, names: tuple[str, ...] | list[str]) -> str:
        return self(list(names), "Array(String)")


class ParameterConflict(ValueError):
    """One parameter name bound to two different values in one query."""


def merged(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of `parts` as one set; a name bound twice must carry the same value.

    Every query's parameters are merged here: a source's, a window's, a
    scan's. A name two of them bind differently would otherwise go to the
    last writer, silently (ParameterConflict names it instead).
    """
    found: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            if name in found and found[name] != value:
                raise ParameterConflict(
                    f"query parameter {name} bound twice: {found[name]!r} and {value!r}"
                )
            found[name] = value
    return found
