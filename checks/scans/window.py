"""The window scan: every quantile, streak and share check of one window length in one read, each
event once (grouped by id), Python getting one row of totals and capped evidence back, the
failing events' triage counts carried along (docs/architecture.md#a-check-kind-one-module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.breakdown import Triage, grouped
from checks.scans.binder import Binder, merged
from checks.scans.windows import ONE, Windowing
from checks.sources import CompiledSource


def numeric_field(field: str, key: str) -> str:
    """SQL: a numeric normalized column, or `payload.<key>` read from the payload JSON.

    `key` is the bound placeholder of the payload key (`field` without `payload.`).
    """
    if field.startswith("payload."):
        return f"toFloat64OrNull(JSONExtractRaw(payload, {key}))"
    return f"toFloat64OrNull(toString({field}))"


@dataclass(frozen=True)
class Carried:
    """Where a check's triage is in the window scan's row: its failing events' count, and
    their counts by dimension."""

    items: str
    by_dim: dict[str, str]

    def read(self, row: Mapping[str, Any]) -> Triage:
        counts = {d: row[alias] for d, alias in self.by_dim.items()}
        return grouped(int(row[self.items]), counts, list(self.by_dim))


# An event evidence lists (time, then id).
LISTED = "Tuple(t Int64, id String)"


@dataclass
class WindowScan:
    """The typed plan of one window scan: per-event figures, totals, what is read back."""

    dims: tuple[str, ...] | None = None
    per_event: list[str] = field(default_factory=list)  # aggregates per event id
    totals: list[str] = field(default_factory=list)  # aggregates over the events
    shown: list[str] = field(default_factory=list)  # what Python reads back
    names: set[str] = field(default_factory=set)
    bind: Binder = field(default_factory=lambda: Binder("w"))
    tags: int = 0

    def tag(self) -> str:
        """A prefix for the columns of one more check, unique in this scan."""
        self.tags += 1
        return f"w{self.tags}"

    def member(self, tag: str, names: Sequence[str]) -> str:
        """Per event: whether it has a row named in `names` (`<tag>_in`), and its time (`<tag>_t`).

        Returns the condition on a row: its name is one of `names`.
        """
        self.names.update(names)
        named = f"name IN {self.bind.names(tuple(names))}"
        self.per_event += [f"countIf({named}) > 0 AS {tag}_in", f"anyIf(t, {named}) AS {tag}_t"]
        return named

    def value(self, tag: str, named: str, expr: str) -> str:
        """Per event: `expr` of its row named as `named` says (`<tag>_v`)."""
        # `if` evaluates `expr` for this check's own events only (a JSON parse, often).
        self.per_event.append(f"anyIf(if({named}, {expr}, NULL), {named}) AS {tag}_v")
        return f"{tag}_v"

    def per_event_item(self, item: str) -> None:
        """A per-event aggregate shared by several checks, added once."""
        if item not in self.per_event:
            self.per_event.append(item)

    def add_totals(self, tag: str, totals: dict[str, str], shown: Sequence[str]) -> dict[str, str]:
        """Totals named `<tag>_<part>`; those in `shown` are read back, by the handles returned
        (part -> the column's alias in the row)."""
        self.totals += [f"{expr} AS {tag}_{part}" for part, expr in totals.items()]
        handles = {part: f"{tag}_{part}" for part in shown}
        self.shown += list(handles.values())
        return handles

    def carry_triage(self, tag: str, failing: str) -> Carried | None:
        """Count a check's failing events, and by each dimension (read back by `carried`).

        An event's dimensions are those of any of its rows (`any(dim_<name>)`).
        """
        if self.dims is None:
            return None
        by_dim = {}
        for d in self.dims:
            self.per_event_item(f"any(dim_{d}) AS edim_{d}")
            by_dim[d] = f"{tag}_by_{d}"
            self.totals.append(f"sumMapIf(([edim_{d}], [toUInt64(1)]), {failing}) AS {by_dim[d]}")
        self.totals.append(f"countIf({failing}) AS {tag}_items")
        self.shown += [f"{tag}_items", *by_dim.values()]
        return Carried(f"{tag}_items", by_dim)

    def params(self) -> dict[str, Any]:
        return merged(self.bind.values, {"window_names": sorted(self.names)})

    def render_raw(self, source: CompiledSource, windowing: Windowing = ONE) -> str:
        """The whole scan over the source's events: one window's row, or one row per window.

        The events are grouped by id directly over the table. With many
        windows an event counts in each window whose range holds it (a check
        with a longer window has overlapping ones).
        """
        per_event = ",\n      ".join(self.per_event)
        totals = ",\n    ".join(self.totals)
        w = windowing
        events = source.select(
            f"{w.key}event_id,\n      {per_event}",
            where="name IN {window_names:Array(String)} AND t >= {ws_ms:Int64}",
            group=w.keys("event_id"),
            dims=self.dims is not None,
            join=w.holding("t"),
        )
        return f"""
SELECT {w.key}{", ".join(self.shown)} FROM (
  SELECT
    {w.key}{totals}
  FROM ({events}
  )
  {w.group()}
)"""
