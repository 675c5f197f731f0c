"""The session scan: every per-session rule of every check in one read, as a typed plan.

Fixed per-session columns and typed `Input`s, per-session figures and totals, rendered from the
events here and from the session state by `checks.state.read`
(docs/architecture.md#a-check-kind-one-module)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from checks.scans.binder import ONE_WINDOW, WS, Binder
from checks.sources import CompiledSource

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

    def params(self) -> dict[str, Any]:
        """`role_names` and `role_masks` (each name with the mask of its sets), the filters."""
        masks: dict[str, int] = {}
        for s, bit in self.bits.items():
            for name in s.names:
                masks[name] = masks.get(name, 0) | (1 << bit)
        params: dict[str, Any] = {"role_names": list(masks), "role_masks": list(masks.values())}
        if self.side_mask():
            params["side_mask"] = self.side_mask()
        for i, (skip, mask) in enumerate(self.filters().items()):
            params[f"skip{i}_mask"] = mask
            params[f"skip{i}_field"] = skip.field
            params[f"skip{i}_values"] = list(skip.values)
        return params

    @staticmethod
    def name_mask(name: str) -> str:
        """SQL: the mask of the sets holding the event name `name`, before any payload filter."""
        return f"transform({name}, {{role_names:Array(String)}}, {{role_masks:Array(UInt64)}}, toUInt64(0))"

    def mask(self, name_mask: str, matches: Callable[[int], str]) -> str:
        """SQL: an event's mask: `name_mask` less the filtered sets its payload excludes it from.

        `matches(i)` is SQL saying whether the event's payload matches
        payload filter i (the field and values bound as `skip<i>_field`,
        `skip<i>_values`). It is evaluated only for events in a filtered set
        (`AND` evaluates its second argument only where the first holds).
        """
        mask = name_mask
        for i in range(len(self.filters())):
            bits = f"{{skip{i}_mask:UInt64}}"
            excluded = f"bitAnd({name_mask}, {bits}) != 0 AND {matches(i)}"
            mask = f"bitAnd({mask}, bitNot(if({excluded}, {bits}, toUInt64(0))))"
        return mask

    def roles(self, mask: str) -> str:
        """SQL: `mask` less the side sets' bits (the sets kept in the role-event array)."""
        return f"bitAnd({mask}, bitNot({{side_mask:UInt64}}))" if self.side_mask() else mask


# --- the per-session level: its typed inputs ---------------------------------------------


@dataclass(frozen=True)
class SideTimes:
    """Per session: the times of the events of side set `bit`."""

    bit: int

    @property
    def alias(self) -> str:
        return f"_side_times_{self.bit}"


@dataclass(frozen=True)
class SideEvents:
    """Per session: (time, id hash, event id) of the events of side set `bit`."""

    bit: int

    @property
    def alias(self) -> str:
        return f"_side_events_{self.bit}"


@dataclass(frozen=True)
class Scope:
    """Per session: whether an event of it matches `predicate`, a check's session filter (the
    compiled source computes it per event as `scope_<check_id>`)."""

    check_id: str
    predicate: str

    @property
    def alias(self) -> str:
        return f"_scoped_{self.check_id}"


@dataclass(frozen=True)
class FirstDim:
    """Per session: the triage dimension `dim` of its first event."""

    dim: str

    @property
    def alias(self) -> str:
        return f"sdim_{self.dim}"


@dataclass(frozen=True)
class SetEvents:
    """Per session: (time, id hash, event id) of the events of role set `bit` (with results,
    when `positive`) from near the window on: the events evidence may name, kept apart from
    `_roles` so that the many passes over it carry no id."""

    bit: int
    positive: bool = False

    @property
    def alias(self) -> str:
        return f"_events_{self.bit}{'_pos' if self.positive else ''}"


@dataclass(frozen=True)
class SetSummary:
    """Per session, over the whole lookback: the first or last time of the events of set `bit`,
    or how many there are (what needs no event near the window: an end, a source that never
    emits a name, the newest event of some names)."""

    bit: int
    what: Literal["first", "last", "count"]

    @property
    def alias(self) -> str:
        return f"_{self.what}_{self.bit}"


Input = SideTimes | SideEvents | SetEvents | Scope | FirstDim | SetSummary

# Per session, always: `scoped` (an event in source.session_filter), `first_seen`,
# `last_seen`, `n_events`, `_roles` (its role events from `near_ms` before the window on:
# (t, mask, id hash, has results, id), the sets kept here, not the side sets) and a count
# per data-quality reason.
# Rows the checks ignore or keep with a caveat, per session, by reason (the report's
# `data_quality`). Role events are those in a set of `_roles` (`_mr != 0`).
DATA_QUALITY: dict[str, str] = {
    # The same event id written more than once (retries); counted once everywhere.
    # Counted among the role events, whose duplicates could change a verdict; a second
    # per-session set of every event id would cost a hash set of the whole lookback.
    "duplicate_rows": "countIf(_mr != 0) - uniqExactIf(cityHash64(event_id), _mr != 0)",
    # A latency that is not a finite, non-negative number: left out of latency checks.
    # Counted with a product, not `AND`: evaluated for every event, the latency's test shares
    # the parse of the metadata the session id already made (a lazy `AND` would parse again).
    "latency_ignored": "sum(toUInt64(_mr != 0) * latency_invalid)",
    # A payload that is not a JSON object: contract checks count it, others ignore it. Any
    # event, not only role events: a session start whose metadata cannot be read loses the
    # session id it carries (joelclaw), and that must not go uncounted. `payload_is_object`
    # (checks.sources) is JSONType(payload) = 'Object', or an exact equivalent.
    "payload_not_json_object": "countIf(NOT payload_is_object)",
    # Names, session ids or payloads that are not valid UTF-8: kept byte for byte (a payload
    # with invalid bytes is also no JSON, so what it carries is lost).
    "invalid_utf8": (
        "countIf((NOT isValidUTF8(name)) + (NOT isValidUTF8(session_id)) + (NOT payload_is_utf8) > 0)"
    ),
    # Session ids over 1 KiB: kept (evidence shows them as they are).
    "session_id_over_1kib": "toUInt64(length(session_id) > 1024)",
}

# The role events' array, from the events: (t, mask, id hash, has results). The hash is the
# event's identity (distinct counts, duplicates, the order of evidence at the same
# millisecond); the ids evidence shows are in `SetEvents`. The result count is read for every
# event: it comes from the parse the session id made (a lazy branch would parse again).
ROLES = "groupArrayIf((t, _m, cityHash64(event_id), ifNull(result_count, 0) > 0), _mr != 0 AND t >= _near)"
# The start of the role events a scan reads: `near_ms` before the window (a grace and a lead
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
    # Totals listing evidence events as (time, id hash, id): the session state fills in ids.
    evidence: list[str] = field(default_factory=list)
    near_ms: int = 0  # how far before the window the figures read role events

    def tag(self) -> str:
        """A prefix for the columns of one more check, unique in this scan."""
        self.tags += 1
        return f"c{self.tags}"

    def __post_init__(self) -> None:
        self.final["newest"] = "max(last_seen)"
        self.final["events"] = "sum(n_events)"
        for reason in DATA_QUALITY:
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
        """A total listing evidence events, each (time, id hash, event id)."""
        self.evidence.append(alias)
        return self.total(alias, expr)

    def near(self, ms: int) -> None:
        """A figure reads role events from `ms` before the window on."""
        self.near_ms = max(self.near_ms, ms)

    def _summary(self, names: Sequence[str], what: Literal["first", "last", "count"]) -> str:
        return self._input(SetSummary(self.sets.bit(names), what))

    def _roles(self, k: int, extra: TimeCondition | None = None, positive: bool = False) -> str:
        """Per session: its role events in set `k` (with results; at a time meeting `extra`)."""
        condition = f"bitTest(x.2, {k})" + (" AND x.4" if positive else "")
        if extra is not None:
            condition += f" AND {extra('x.1')}"
        return f"arrayFilter(x -> {condition}, _roles)"

    def times(self, names: Sequence[str], side: bool = False) -> str:
        """Per session: the times of its events named in `names` (none without a session)."""
        k = self.sets.bit(names, side=side)
        picked = self._input(SideTimes(k)) if side else f"arrayMap(x -> x.1, {self._roles(k)})"
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
        """Per session: (time, id hash, event id) of each trigger event, duplicates counted once.

        `may_be_due` keeps only the triggers whose deadline may fall in the
        window: filtering before `arrayDistinct` spares the hashing of the
        many that cannot (most of the lookback lies before the window).
        """
        k = self.sets.bit(names, skip, side)
        alias = f"triggers_{k}{'_pos' if positive else ''}_{tag}"
        events = self._input(SideEvents(k) if side else SetEvents(k, positive))
        picked = f"arrayFilter(x -> {may_be_due('x.1')}, {events})"
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
        """Per session: (time, event id) of its role events of `names` from near the window on,
        oldest first."""
        k = self.sets.bit(names)
        picked = f"arraySort(arrayMap(x -> (x.1, x.3), {self._input(SetEvents(k))}))"
        return self.per_session(f"events_{k}", f"if(session_id != '', {picked}, [])")

    def first_id_of(self, names: Sequence[str]) -> str:
        """Per session: the event id of its first role event of `names` ('' when none)."""
        return self.per_session(f"first_id_{self.sets.bit(names)}", f"{self.events_of(names)}[1].2")

    def count_in_window(self, names: Sequence[str]) -> str:
        """Per session (sessionless events included): distinct events of `names` in W."""
        k = self.sets.bit(names)
        events = self._roles(k, lambda t: f"{t} >= {WS}")
        return self.per_session(
            f"count_{k}", f"length(arrayDistinct(arrayMap(x -> x.3, {events})))"
        )

    def oldest_in_window(self, names: Sequence[str]) -> str:
        """Per session: the oldest 20 (time, id hash, event id) of `names` in W."""
        k = self.sets.bit(names)
        events = f"arrayFilter(x -> x.1 >= {WS}, {self._input(SetEvents(k))})"
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

    # --- rendering ---------------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return {**self.sets.params(), **self.bind.values, "near_ms": self.near_ms}

    def masked(self, source: CompiledSource, near: str = NEAR) -> str:
        """The source's events (with their dimensions when carrying triage), their masks, `_near`.

        `_m`: the name sets an event is in; `_mr`: those kept in the role-event
        array; `_near`: where the role events read start (`near`).
        """

        def matches(i: int) -> str:
            return (
                f"JSONExtractString(payload, {{skip{i}_field:String}})"
                f" IN {{skip{i}_values:Array(String)}}"
            )

        mask = self.sets.mask("_m0", matches)
        masks = (
            f"{NameSets.name_mask('name')} AS _m0, {mask} AS _m, {self.sets.roles('_m')} AS _mr,"
            f" {near} AS _near"
        )
        events = source.events() if self.dims is None else source.events_with_dims()
        return f"SELECT *, {masks}\n      FROM {events}"

    def gathered(self) -> list[str]:
        """The arrays per session several inputs are read from, as aggregates over its events.

        The sets' events evidence names, and the lookback-wide figures of sets, each from one
        array per session rather than an aggregate per set (each aggregate costs every event).
        """
        found = []
        named = _mask_of(item.bit for item in self.inputs.values() if isinstance(item, SetEvents))
        if named:
            found.append(
                "groupArrayIf((t, _m, cityHash64(event_id), ifNull(result_count, 0) > 0,"
                f" event_id), bitAnd(_m, toUInt64({named})) != 0 AND t >= _near) AS _evidenced"
            )
        summarized = _mask_of(
            item.bit for item in self.inputs.values() if isinstance(item, SetSummary)
        )
        if summarized:
            found.append(
                f"groupArrayIf((t, _m), bitAnd(_m, toUInt64({summarized})) != 0) AS _summarized"
            )
        return found

    def render_raw(self, source: CompiledSource) -> str:
        """The whole scan over the source's events (with their dimensions when carrying triage)."""
        inner = [f"{ROLES} AS _roles"]
        inner += [f"{expr} AS dq_{reason}" for reason, expr in DATA_QUALITY.items()]
        inner += self.gathered()
        inner += [f"{raw_input(item)} AS {alias}" for alias, item in self.inputs.items()]
        aggregates = ",\n        ".join(inner)
        return self.around(f"""
    SELECT
        session_id,
        max(in_scope) AS scoped,
        min(t) AS first_seen,
        max(t) AS last_seen,
        count() AS n_events,
        {aggregates}
    FROM (
      {self.masked(source)}
    )
    GROUP BY session_id""")

    def around(self, per_session: str, windowed: bool = False) -> str:
        """The levels above the per-session one: per-session figures, then the totals.

        The figures compare times with the window's bounds (`WS`, `AT`, `LB`):
        one window's, bound as parameters, or (`windowed`) those of each row of
        `per_session`, one row per session and window, the totals then one row
        per window (`_w`).
        """
        outer = ",\n      ".join(f"{expr} AS {alias}" for alias, expr in self.outer.items())
        final = ",\n  ".join(f"{expr} AS {alias}" for alias, expr in self.final.items())
        bounds = "" if windowed else f"\n      {ONE_WINDOW},"
        key, group = ("_w,\n  ", "\nGROUP BY _w") if windowed else ("", "")
        return f"""
SELECT
  {key}{final}
FROM (
  SELECT
      *,{bounds}
      session_id != '' AS real,
      {outer or "1 AS _none"}
  FROM ({per_session}
  )
){group}"""


def _mask_of(bits: Iterable[int]) -> int:
    return sum(1 << bit for bit in set(bits))


def raw_input(item: Input) -> str:
    """SQL: a per-session input, an aggregate over the session's events (or over one of the
    arrays `render_raw` gathers for several inputs)."""
    if isinstance(item, SideTimes):
        return f"groupArrayIf(t, bitTest(_m, {item.bit}) AND t >= _near)"
    if isinstance(item, SideEvents):
        return (
            f"groupArrayIf((t, cityHash64(event_id), event_id), bitTest(_m, {item.bit})"
            " AND t >= _near)"
        )
    if isinstance(item, SetEvents):  # from the sets' events evidence names (`_evidenced`)
        positive = " AND x.4" if item.positive else ""
        picked = f"arrayFilter(x -> bitTest(x.2, {item.bit}){positive}, _evidenced)"
        return f"arrayMap(x -> (x.1, x.3, x.5), {picked})"
    if isinstance(item, Scope):
        return f"max(scope_{item.check_id})"
    if isinstance(item, SetSummary):  # from the summarized sets' events (`_summarized`)
        picked = f"arrayFilter(x -> bitTest(x.2, {item.bit}), _summarized)"
        if item.what == "count":
            return f"length({picked})"
        return f"{'arrayMin' if item.what == 'first' else 'arrayMax'}(arrayMap(x -> x.1, {picked}))"
    return f"argMin(dim_{item.dim}, t)"
