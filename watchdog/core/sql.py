"""SQL text the watchdog writes itself: literals and identifiers, each made one way.

Data values travel as bound parameters wherever ClickHouse takes them; a literal is for the
few places that cannot hold one (a view's definition, a table's COMMENT, a `clickhouse-client`
script). Identifiers (databases, tables, clusters) come from config and are checked before they
reach SQL (docs/guarantees.md#security).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_IDENTIFIER = re.compile(IDENTIFIER)
_TABLE = re.compile(rf"{IDENTIFIER}(\.{IDENTIFIER})?")


def quoted(text: str) -> str:
    """A string as a ClickHouse string literal: quotes and backslashes escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def literal(value: str | int | float | bool | Sequence[str] | Sequence[int]) -> str:
    """A value as a ClickHouse literal: numbers bare, text quoted, a list of strings typed, a
    list of integers bare."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return quoted(value)
    if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return f"[{', '.join(str(v) for v in value)}]"
    return f"CAST([{', '.join(quoted(str(v)) for v in value)}] AS Array(String))"


def tuple_of(values: Sequence[str]) -> str:
    """Strings as a ClickHouse tuple literal, the right side of `IN`: `('a', 'b')`."""
    return "(" + ", ".join(quoted(v) for v in values) + ")"


def is_identifier(value: str) -> bool:
    """Whether `value` is a plain identifier (letters, digits, _; not a digit first)."""
    return _IDENTIFIER.fullmatch(value) is not None


def is_table_name(value: str) -> bool:
    """Whether `value` is `table` or `database.table`, each part an identifier."""
    return _TABLE.fullmatch(value) is not None
