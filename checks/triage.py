"""The triage's shared parts: the source's dimensions, free text as normalised error classes
(only with `report.error_classes`), and grouping failing events; which items fail is each
kind's (`checks.kinds`). What the on-call person reads: docs/operations.md#the-triage-breakdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from checks.breakdown import TOP, Dimension, Group, Triage
from checks.scans.binder import merged
from checks.scans.plans import Context
from checks.sources import CompiledSource
from watchdog.core.sql import quoted

CLASS_CHARS = 120
# Dimensions holding free text: shown only as normalised error classes.
FREE_TEXT = frozenset({"error", "StatusMessage"})

# Applied in order by `error_class`; bound as parameters (RE2 syntax).
NORMALISE = (
    ("tr_re_url", r"(?i)\b[a-z][a-z0-9+.-]*://\S+", "<url>"),
    ("tr_re_email", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", "<email>"),
    ("tr_re_quoted", r"\"[^\"]*\"|'[^']*'|`[^`]*`", "<q>"),
    (
        "tr_re_uuid",
        r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
        "<id>",
    ),
    ("tr_re_prefixed", r"\b[A-Za-z]+[-_:][\w-]*\d[\w-]*", "<id>"),
    ("tr_re_hex", r"\b[0-9a-fA-F]{8,}\b", "<id>"),
    ("tr_re_number", r"\b\d+(?:\.\d+)?(?:ms|s|m|h|d|%)?\b", "<n>"),
    ("tr_re_token", r"[\w.:/-]*\d[\w.:/-]*", "<id>"),
    ("tr_re_space", r"\s+", " "),
)


def error_class(column: str) -> str:
    """SQL: free text normalised into a class, so messages differing only in ids merge."""
    expr = column
    for name, _, replacement in NORMALISE:
        expr = f"replaceRegexpAll({expr}, {{{name}:String}}, '{replacement}')"
    return f"leftUTF8(trimBoth({expr}), {CLASS_CHARS})"


def plain(dims: Iterable[str]) -> list[str]:
    """The dimensions that are no free text: events that did not fail carry no error to classify."""
    return [d for d in dims if d not in FREE_TEXT]


def dimensions(source: CompiledSource, error_classes: bool) -> list[str]:
    """The dimensions to group by: free text only when error classes are wanted."""
    return [name for name in source.dims if error_classes or name not in FREE_TEXT]


def items(
    source: CompiledSource,
    dims: Sequence[str],
    condition: str,
    label: str,
    shown: Mapping[str, str] | None = None,
) -> str:
    """Items: the events of the read range meeting `condition`, one row per event id, grouped
    by id directly over the table, with their dimensions (`shown` replaces some: SQL by
    dimension) and `dim_outcome` = `label` when given."""
    columns = "".join(f", {(shown or {}).get(d, f'any(dim_{d})')} AS _tr_dim_{d}" for d in dims)
    grouped = source.select(
        f"event_id AS item, any(t) AS _tr_t{columns}", where=condition, group="event_id", dims=True
    )
    renamed = "".join(f", _tr_dim_{d} AS dim_{d}" for d in dims)
    outcome = f", {quoted(label)} AS dim_outcome" if label else ""
    return f"SELECT item, _tr_t AS t{renamed}{outcome} FROM ({grouped}\n)"


def events_in_window(
    source: CompiledSource, dims: Sequence[str], condition: str, outcome: str = ""
) -> str:
    """Items: the events of W meeting `condition`, one row per event id, with their dimensions.

    `outcome`, when given, labels every item (`dim_outcome`).
    """
    return items(source, dims, f"t >= {{ws_ms:Int64}} AND ({condition})", outcome)


def group(ctx: Context, items_sql: str, dims: Sequence[str], params: Mapping[str, Any]) -> Triage:
    """Count the items, and the top groups of each dimension with their counts and shares.

    `items_sql` yields one row per item with a `dim_<name>` column per dimension.
    """
    pairs = ", ".join(
        ["('', '')"]
        + [f"('{d}', {error_class(f'dim_{d}') if d in FREE_TEXT else f'dim_{d}'})" for d in dims]
    )
    sql = f"""
SELECT dimension, value, n FROM (
  SELECT d.dimension AS dimension, d.value AS value, count() AS n
  FROM ({items_sql})
  ARRAY JOIN CAST([{pairs}] AS Array(Tuple(dimension String, value String))) AS d
  GROUP BY dimension, value
)
ORDER BY dimension, n DESC, value
LIMIT {TOP} BY dimension"""
    normalise = {name: pattern for name, pattern, _ in NORMALISE}
    bound = merged(ctx.source.params, ctx.window.params(), params, normalise)
    rows = ctx.store.query(sql, bound).rows
    total = next((int(n) for dim, _, n in rows if dim == ""), 0)
    groups: dict[str, list[Group]] = {d: [] for d in dims}
    for dim, value, n in rows:
        if dim:
            share = int(n) / total if total else 0.0
            groups[str(dim)].append(Group(str(value), int(n), share))
    # Free text no failing item carries says nothing: left out ("error" of a source whose
    # failures have no error attribute).
    found = tuple(
        Dimension(d, tuple(g))
        for d, g in groups.items()
        if g and not (d in FREE_TEXT and all(x.value == "" for x in g))
    )
    return Triage(items=total, noun="events", dimensions=found)
