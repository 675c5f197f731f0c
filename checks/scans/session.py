"""The session scan: every per-session rule of every check in one read, as a typed plan.

The per-session level is the one session row (`checks.scans.row`): its
columns aggregated over the events grouped directly by session (here), over
the session state's hours (`checks.state.read`) or over a backtest's pieces
(`checks.scans.per_window`), then finalized into the typed inputs the
figures read; the figures and the totals above it are this plan's
(docs/architecture.md#the-one-session-row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from checks.scans.binder import ONE_WINDOW, WS, Binder, merged
from checks.scans.row import (
    QUALITY,
    FirstDim,
    Input,
    Needs,
    Reading,
    Scope,
    SetEvents,
    SetSummary,
    SideEvents,
    SideTimes,
    Terms,
    aggregates,
    finalized,
    id_names,
)
from checks.sharding import Sharding
from checks.sources import CompiledSource
from watchdog.core.sql import quoted

EVIDENCE = 20  # evidence items per check, oldest first

# A condition over one element's time, as SQL (`lambda t: f"{t} >= ..."`).
TimeCondition = Callable[[str], str]


@dataclass(frozen=True)
class PayloadMatch:
    """Events whose payload `field` (a string) is one of `values`."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class NameSet:
    """A set of event names; with `skip`, its events whose payload matches are not members.

    A `side` set's events are kept in per-session arrays of their own
    (`SideTimes`, `SideEvents`), so that busy names (every human message,
    every response) do not lengthen the array of memory events every other
    figure scans.
    """

    names: tuple[str, ...]
    skip: PayloadMatch | None = None
    side: bool = False


@dataclass
class NameSets:
    """Assigns one bit of a 64-bit mask to each distinct name set."""

    bits: dict[NameSet, int] = field(default_factory=dict)

    def bit(
        self, names: Sequence[str], skip: PayloadMatch | None = None, side: bool = False
    ) -> int:
        key = NameSet(tuple(sorted(set(names))), skip, side)
        if key not in self.bits:
            if len(self.bits) == 64:
                raise ValueError("more than 64 distinct event-name sets in one query")
            self.bits[key] = len(self.bits)
        return self.bits[key]

    def names(self) -> tuple[str, ...]:
        """Every event name some set holds, sorted."""
        return tuple(sorted({name for s in self.bits for name in s.names}))

    def side_mask(self) -> int:
        """The bits of the side sets (0: there are none)."""
        return sum(1 << bit for s, bit in self.bits.items() if s.side)

    def filters(self) -> dict[PayloadMatch, int]:
        """Each distinct payload filter, and the mask of the sets it applies to."""
        masks: dict[PayloadMatch, int] = {}
        for s, bit in self.bits.items():
            if s.skip is not None:
                masks[s.skip] = masks.get(s.skip, 0) | (1 << bit)
        return masks

    def by_name(self) -> dict[str, int]:
        """Each event name some set holds, and the mask of the sets holding it."""
        masks: dict[str, int] = {}
        for s, bit in self.bits.items():
            for name in s.names:
                masks[name] = masks.get(name, 0) | (1 << bit)
        return masks

    def names_of(self, bit: int) -> tuple[str, ...]:
        """The names of the set of `bit`."""
        return next(s.names for s, b in self.bits.items() if b == bit)

    def mask(self, name_mask: str, matches: Callable[[PayloadMatch], str], bind: Binder) -> str:
        """SQL: an event's mask: `name_mask` less the filtered sets its payload excludes it from.

        `matches(filter)` is SQL saying whether the event's payload matches
        that payload filter.
        """
        mask = name_mask
        for skip, bits in self.filters().items():
            bound = bind(bits, "UInt64")
            excluded = f"bitAnd({name_mask}, {bound}) != 0 AND {matches(skip)}"
            mask = f"bitAnd({mask}, bitNot(if({excluded}, {bound}, toUInt64(0))))"
        return mask

    def roles(self, mask: str, bind: Binder) -> str:
        """SQL: `mask` less the side sets' bits (the sets kept in the role-event array)."""
        side = self.side_mask()
        return f"bitAnd({mask}, bitNot({bind(side, 'UInt64')}))" if side else mask


# The start of the kept events a scan reads: `near_ms` before the window (a grace and a lead
# at most: no obligation due in the window looks further back at an event).
NEAR = "{ws_ms:Int64} - {near_ms:Int64}"


@dataclass
class SessionScan:
    """The typed plan of one session scan: per-session inputs, per-session figures, totals.

    Kinds add what they need through the methods below, each returning the
    alias of the column it made; a kind reads its totals back by those
    aliases from the scan's one row. With `dims`, coverage kinds carry their
    triage breakdown too.
    """

    dims: tuple[str, ...] | None = None
    sets: NameSets = field(default_factory=NameSets)
    inputs: dict[str, Input] = field(default_factory=dict)
    outer: dict[str, str] = field(default_factory=dict)  # alias -> per-session expression
    final: dict[str, str] = field(default_factory=dict)  # alias -> total over sessions
    bind: Binder = field(default_factory=lambda: Binder("s"))
    tags: int = 0
    # Totals listing evidence events (EVENT): the session state fills in their ids.
    evidence: list[str] = field(default_factory=list)
    near_ms: int = 0  # how far before the window the figures read kept events

    def tag(self) -> str:
        """A prefix for the columns of one more check, unique in this scan."""
        self.tags += 1
        return f"c{self.tags}"

    def __post_init__(self) -> None:
        self.final["newest"] = "max(last_seen)"
        self.final["events"] = "sum(n_events)"
        for reason in QUALITY:
            self.final[f"dq_{reason}"] = f"sum(dq_{reason})"

    # --- what the kinds add ----------------------------------------------------------------

    def _input(self, item: Input) -> str:
        self.inputs[item.alias] = item
        return item.alias

    def per_session(self, alias: str, expr: str) -> str:
        """A per-session figure (`real`: the session is one, `scoped`: in the source's scope)."""
        self.outer[alias] = expr
        return alias

    def total(self, alias: str, expr: str) -> str:
        """A total over the sessions, read back from the row by `alias`."""
        self.final[alias] = expr
        return alias

    def evidence_total(self, alias: str, expr: str) -> str:
        """A total listing evidence events (EVENT)."""
        self.evidence.append(alias)
        return self.total(alias, expr)

    def near(self, ms: int) -> None:
        """A figure reads kept events from `ms` before the window on."""
        self.near_ms = max(self.near_ms, ms)

    def _summary(self, names: Sequence[str], what: Literal["first", "last", "count"]) -> str:
        return self._input(SetSummary(self.sets.bit(names), what))

    def _roles(self, k: int, extra: TimeCondition | None = None, positive: bool = False) -> str:
        """Per session: its role events in set `k` (with results; at a time meeting `extra`)."""
        condition = f"bitTest(x.mask, {k})" + (" AND x.results" if positive else "")
        if extra is not None:
            condition += f" AND {extra('x.t')}"
        return f"arrayFilter(x -> {condition}, _roles)"

    def times(self, names: Sequence[str], side: bool = False) -> str:
        """Per session: the times of its events named in `names` (none without a session)."""
        k = self.sets.bit(names, side=side)
        picked = self._input(SideTimes(k)) if side else f"arrayMap(x -> x.t, {self._roles(k)})"
        return self.per_session(f"times_{k}", f"if(session_id != '', {picked}, [])")

    def triggers(
        self,
        names: Sequence[str],
        *,
        tag: str,
        may_be_due: TimeCondition,
        positive: bool = False,
        skip: PayloadMatch | None = None,
        side: bool = False,
    ) -> str:
        """Per session: each trigger event (EVENT), duplicates counted once.

        `may_be_due` keeps only the triggers whose deadline may fall in the
        window: filtering before `arrayDistinct` spares the hashing of the
        many that cannot (most of the lookback lies before the window).
        """
        k = self.sets.bit(names, skip, side)
        alias = f"triggers_{k}{'_pos' if positive else ''}_{tag}"
        events = self._input(SideEvents(k) if side else SetEvents(k, positive))
        picked = f"arrayFilter(x -> {may_be_due('x.t')}, {events})"
        return self.per_session(alias, f"if(session_id != '', arrayDistinct({picked}), [])")

    def first_of(self, names: Sequence[str]) -> tuple[str, str]:
        """Per session, over the lookback: whether any of `names` happened, and when first."""
        k = self.sets.bit(names)
        has = self.per_session(f"has_{k}", f"{self._summary(names, 'count')} > 0")
        return has, self._summary(names, "first")

    def last_of(self, names: Sequence[str]) -> str:
        """Per session, over the lookback: the last time one of `names` happened (0: none)."""
        return self._summary(names, "last")

    def events_of(self, names: Sequence[str]) -> str:
        """Per session: (t, id) of its kept events of `names` from near the window on, oldest
        first."""
        k = self.sets.bit(names)
        picked = (
            "arraySort(arrayMap(x -> CAST((x.t, x.id) AS Tuple(t Int64, id String)),"
            f" {self._input(SetEvents(k))}))"
        )
        return self.per_session(f"events_{k}", f"if(session_id != '', {picked}, [])")

    def first_id_of(self, names: Sequence[str]) -> str:
        """Per session: the event id of its first kept event of `names` ('' when none)."""
        return self.per_session(
            f"first_id_{self.sets.bit(names)}", f"{self.events_of(names)}[1].id"
        )

    def count_in_window(self, names: Sequence[str]) -> str:
        """Per session (sessionless events included): distinct events of `names` in W."""
        k = self.sets.bit(names)
        events = self._roles(k, lambda t: f"{t} >= {WS}")
        return self.per_session(
            f"count_{k}", f"length(arrayDistinct(arrayMap(x -> x.hash, {events})))"
        )

    def oldest_in_window(self, names: Sequence[str]) -> str:
        """Per session: the oldest 20 events (EVENT) of `names` in W."""
        k = self.sets.bit(names)
        events = f"arrayFilter(x -> x.t >= {WS}, {self._input(SetEvents(k))})"
        # Distinct first: a duplicated row must not take two of the 20 places.
        return self.per_session(
            f"oldest_{k}", f"arraySlice(arraySort(arrayDistinct({events})), 1, {EVIDENCE})"
        )

    def seen(self, names: Sequence[str]) -> tuple[str, str]:
        """Per session: how many events of `names` exist within lookback, and the newest."""
        return self._summary(names, "count"), self._summary(names, "last")

    def scoped(self, check_id: str, predicate: str | None) -> str:
        """Per session: whether it is in scope (a check's own session filter, else the source's)."""
        if predicate is None:
            return "scoped"
        return self._input(Scope(check_id, predicate))

    def first_dims(self) -> tuple[str, ...]:
        """Per session: the aliases of its first event's triage dimensions (`dims`)."""
        return tuple(self._input(FirstDim(d)) for d in self.dims or ())

    # --- the per-session level: the one session row, then its inputs --------------------------

    def params(self) -> dict[str, Any]:
        return merged(self.bind.values, {"near_ms": self.near_ms})

    def needs(self) -> Needs:
        """What this scan reads of each event."""
        return Needs.of([self], self.dims or ())

    def terms(self, needs: Needs, near: str = NEAR) -> Terms:
        """The event terms this scan aggregates, its evidence events keeping their ids."""
        return Terms(
            needs, self.bind, near=near, ids=id_names(self.inputs.values(), self.sets.names_of)
        )

    def reading(self, needs: Needs) -> Reading:
        """How this scan reads the kept events of a row kept for `needs`: each name code's
        mask (bound), a kept event's mask less the sets its payload filters exclude it from."""
        by_name = self.sets.by_name()
        masks = self.bind([by_name.get(name, 0) for name in needs.names], "Array(UInt64)")
        name_mask = f"arrayElement({masks}, e.code)"  # code 0: no element, 0

        def matched(skip: PayloadMatch) -> str:
            return f"bitTest(e.flags, {needs.flag(skip.field, skip.values)})"

        mask = self.sets.mask(name_mask, matched, self.bind)
        return Reading(masks, mask, lambda m: self.sets.roles(m, self.bind))

    def finalize(self, merged: str, needs: Needs) -> str:
        """The per-session level: the merged session rows of `merged`, with the scan's inputs."""
        items = ",\n    ".join(finalized(self.inputs, needs, self.reading(needs), self.bind))
        return f"SELECT\n    *,\n    {items}\nFROM ({merged}\n)"

    def render_raw(self, source: CompiledSource) -> str:
        """The whole scan over the source's events, grouped by session directly over the table;
        on a table sharded by session, each shard judges its own sessions."""
        needs = self.needs()
        terms = self.terms(needs)
        shards = source.on_shards()
        over = shards or source
        part = over.select(
            f"session_id,\n    {aggregates(terms)}",
            group="session_id",
            dims=bool(needs.dims),
            terms=terms.items(),
        )
        return self.around(self.finalize(part, needs), on=source.sharding if shards else None)

    def around(self, per_session: str, windowed: bool = False, on: Sharding | None = None) -> str:
        """The levels above the per-session one: per-session figures, then the totals.

        The figures compare times with the window's bounds (`WS`, `AT`, `LB`):
        one window's, bound as parameters, or (`windowed`) those of each row of
        `per_session`, one row per session and window, the totals then one row
        per window (`_w`). `on` a cluster whose shards each hold their sessions
        whole (`per_session` reading a shard's own tables), each shard computes
        its sessions' figures and its part of the totals; the initiator merges
        those.
        """
        outer = ",\n      ".join(f"{expr} AS {alias}" for alias, expr in self.outer.items())
        final = ",\n  ".join(f"{expr} AS {alias}" for alias, expr in self.final.items())
        bounds = "" if windowed else f"\n      {ONE_WINDOW},"
        key, group = ("_w,\n  ", "\nGROUP BY _w") if windowed else ("", "")
        figures = f"""
  SELECT
      *,{bounds}
      session_id != '' AS real,
      {outer or "1 AS _none"}
  FROM ({per_session}
  )"""
        relation = f"({figures}\n)"
        if on is not None:
            relation = f"cluster({quoted(on.cluster)}, view({figures}\n))"
        return f"""
SELECT
  {key}{final}
FROM {relation}{group}"""
