"""Bound parameters: a value in, its `{name:Type}` placeholder out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The window's bounds in epoch milliseconds, bound by every scan (`Window.params`).
WS = "{ws_ms:Int64}"  # the window's start
AT = "{at_ms:Int64}"  # its end: events at or after it do not exist
LB = "{lb_ms:Int64}"  # the start of the lookback


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
