"""The one session row: every per-session column defined once, as its aggregate over events, its
merge over partial rows (hours of the state, pieces of a backtest, shards of a cluster) and its
stored column; the scans' typed inputs and data-quality counts finalized from the merged row
(docs/architecture.md#the-one-session-row).

A session's events give one partial row per part of its read range: the
whole lookback (a check on the events), each stored hour plus the two hours
the lookback cuts (the session state), or each piece of a backtest. The
columns below say how each is aggregated over events (`Column.aggregate`),
merged over partial rows (`Merge`), and stored (`Column.stored`); the drivers
(`checks.scans.session`, `checks.state.read`, `checks.scans.per_window`) only
choose the parts. What a scan reads of the merged row is `finalized`: one
function over the `Input` types, exhaustive by construction (`assert_never`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from checks.scans.binder import Values

# A kept event: time, id hash, name code (its place in `Needs.names`, from 1), flags (bit 0
# "has results", bit 1 + k "matches payload filter k") and its id ('' where no evidence names it).
ROLE = "Tuple(t Int64, hash UInt64, code UInt16, flags UInt8, id String)"
# The session's first event: its time and its triage dimensions (in the order kept).
FIRST = "Tuple(t Int64, dims Array(String))"
# A kept event as a scan's figures read it: the name sets it is in (`mask`), whether it has
# results.
SEEN = "Tuple(t Int64, mask UInt64, hash UInt64, results UInt8)"
# An event evidence may name, as triggers, misses and evidence carry it.
EVENT = "Tuple(t Int64, hash UInt64, id String)"


@dataclass(frozen=True)
class Filter:
    """A payload filter some name set has: events of `names` whose `field` is one of `values`."""

    field: str
    names: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True)
class Needs:
    """What the per-session level keeps of each event, for a set of session scans.

    A scan's own needs on the events; on the session state, what its view
    keeps (recorded in its table's COMMENT), which may be more.
    """

    names: tuple[str, ...]  # the event names some session rule reads (codes 1, 2, ...)
    filters: tuple[Filter, ...]  # the payload filters, in flag order
    scopes: tuple[tuple[str, str], ...]  # (check id, its session filter)
    dims: tuple[str, ...]  # the triage dimensions of a session's first event

    @classmethod
    def of(cls, scans: Iterable[Any], dims: Iterable[str] = ()) -> Needs:
        """What `scans` (SessionScans) read, and the dimensions `dims`."""
        names: set[str] = set()
        filters: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        scopes: dict[str, str] = {}
        wanted = set(dims)
        for scan in scans:
            for name_set in scan.sets.bits:
                names.update(name_set.names)
                if name_set.skip is not None:
                    key = (name_set.skip.field, tuple(sorted(set(name_set.skip.values))))
                    filters.setdefault(key, set()).update(name_set.names)
            for item in scan.inputs.values():
                match item:
                    case Scope(check_id, predicate):
                        scopes[check_id] = predicate
                    case FirstDim(dim):
                        wanted.add(dim)
                    case SideTimes() | SideEvents() | SetEvents() | SetSummary():
                        pass
                    case _:
                        assert_never(item)
        return cls(
            tuple(sorted(names)),
            tuple(Filter(f, tuple(sorted(n)), v) for (f, v), n in sorted(filters.items())),
            tuple(sorted(scopes.items())),
            tuple(sorted(wanted)),
        )

    def flag(self, field: str, values: Iterable[str]) -> int:
        """The flag bit of the payload filter on `field` matching one of `values`."""
        wanted = tuple(sorted(set(values)))
        for k, f in enumerate(self.filters):
            if f.field == field and f.values == wanted:
                return k + 1
        raise KeyError(f"no payload filter on {field} is kept")


# --- the typed inputs a scan reads per session ------------------------------------------


@dataclass(frozen=True)
class SideTimes:
    """Per session: the times of the events of side set `bit`."""

    bit: int

    @property
    def alias(self) -> str:
        return f"_side_times_{self.bit}"


@dataclass(frozen=True)
class SideEvents:
    """Per session: the events (EVENT) of side set `bit`."""

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
    """Per session: the events (EVENT) of role set `bit` (with results, when `positive`) from
    near the window on: the events evidence may name."""

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


# --- the event level: what each event contributes ---------------------------------------


@dataclass(frozen=True)
class Terms:
    """The per-event terms the columns aggregate, for one driver.

    `values` writes data (bound, or literal in a view); `near` is SQL for the
    earliest time of the kept events this driver aggregates ('' for all);
    `ids` the names evidence may name (with any, the kept events keep their id; the
    state keeps none and resolves ids by hash); `summaries` the names whose
    first and last times and counts a scan reads over the lookback (the state
    keeps them all).
    """

    needs: Needs
    values: Values
    near: str = ""
    ids: tuple[str, ...] = ()
    summaries: tuple[str, ...] | None = None  # the names a summary reads (None: every kept one)

    def items(self) -> list[tuple[str, str]]:
        """(alias, SQL) of each term, over the normalized event.

        No term evaluates a parsed field lazily (`if`, `AND`): every event
        reads it anyway (its session id comes from the same parse), and a lazy
        branch would parse again for the rows it keeps. Payload filters do read
        the payload lazily, for their names only.
        """
        v, needs = self.values, self.needs
        names = v.names(needs.names)
        codes = v(list(range(1, len(needs.names) + 1)), "Array(UInt16)")
        code = f"transform(name, {names}, {codes}, toUInt16(0))" if needs.names else "toUInt16(0)"
        matched = [
            f"bitShiftLeft(toUInt8(name IN {v.names(f.names)} AND"
            f" JSONExtractString(payload, {v(f.field, 'String')}) IN {v.names(f.values)}), {k + 1})"
            for k, f in enumerate(needs.filters)
        ]
        flags = " + ".join(["toUInt8(ifNull(result_count, 0) > 0)", *matched])
        scoped = ", ".join(
            f"if(scope_{check} != 0, {v(check, 'String')}, '')" for check, _ in needs.scopes
        )
        utf8 = "isValidUTF8(name) AND isValidUTF8(session_id) AND payload_is_utf8 != 0"
        return [
            ("_code", code),
            ("_kept", "toUInt8(_code != 0)"),
            ("_hash", "cityHash64(event_id)"),
            ("_flags", f"toUInt8(_kept * ({flags}))"),
            ("_scopes", f"CAST(arrayFilter(x -> x != '', [{scoped}]) AS Array(String))"),
            (
                "_quality",
                f"toUInt8(_kept * latency_invalid * {LATENCY_INVALID}"
                f" + (payload_is_object = 0) * {NOT_OBJECT} + (NOT ({utf8})) * {NOT_UTF8})",
            ),
        ]

    @property
    def kept(self) -> str:
        """SQL: the event is kept with its time (a kept name, near enough)."""
        return "_kept = 1" + (f" AND t >= {self.near}" if self.near else "")

    @property
    def id(self) -> str:
        """SQL: a kept event's id, when evidence may name it (else '': resolved by its hash)."""
        return "event_id" if self.ids else "''"

    @property
    def summarized(self) -> str:
        """SQL: the event is of a name a summary reads."""
        if self.summaries is None:
            return "_kept = 1"
        if not self.summaries:
            return "0"
        return f"name IN {self.values.names(self.summaries)}"


# --- how partial rows merge ---------------------------------------------------------------


@dataclass(frozen=True)
class Merge:
    """How partial values of a column combine: over rows (an aggregate function), over an
    array of them, and what a stored column merges with (its SimpleAggregateFunction)."""

    stored: str  # the aggregate function a stored column of it merges with
    rows: str  # SQL over the partial values of a column `{0}` in grouped rows
    array: str  # SQL over an array `{0}` of partial values

    def over_rows(self, column: str) -> str:
        return self.rows.format(column)

    def over_array(self, values: str) -> str:
        return self.array.format(values)


MIN = Merge("min", "min({0})", "arrayMin({0})")
MAX = Merge("max", "max({0})", "arrayMax({0})")
SUM = Merge("sum", "sum({0})", "arraySum({0})")
CONCAT = Merge("groupArrayArray", "groupArrayArray({0})", "arrayFlatten({0})")
UNION = Merge("groupUniqArrayArray", "groupUniqArrayArray({0})", "arrayDistinct(arrayFlatten({0}))")


@dataclass(frozen=True)
class Column:
    """One column of the session row: its type, its aggregate over events, its merge.

    The merge combines the parts of one read (the whole lookback, the
    state's hours and the hours the lookback cuts, a backtest's pieces, the
    shards of a cluster); a stored column of the session state merges with
    the same function (its `SimpleAggregateFunction`). `events`: it holds
    kept events by time, so a driver merges only those from near the window
    on (`Terms.near`, `Column.kept`).
    """

    name: str
    type: str
    merge: Merge
    aggregate: Callable[[Terms], str]
    events: bool = False

    @property
    def stored(self) -> str:
        """The type of its column in the session state."""
        return f"SimpleAggregateFunction({self.merge.stored}, {self.type})"

    def kept(self, values: str, near: str) -> str:
        """SQL: partial values `values` of it, the kept events from `near` on when it has events."""
        if not self.events or not near:
            return values
        return f"arrayFilter(e -> e.t >= {near}, {values})"


# A kept event of a name some summary reads (its first or last time, its count), over the
# lookback.
SUMMED = "Tuple(t Int64, code UInt16)"
# What data quality counts an event for: the bits of `Terms`' `_quality`.
LATENCY_INVALID, NOT_OBJECT, NOT_UTF8 = 1, 2, 4


def _first(e: Terms) -> str:
    """The session's first event's time and dimensions (those kept, in their order; of any
    one of its first events, should two share that time)."""
    dims = ", ".join(f"argMin(dim_{d}, t)" for d in e.needs.dims)
    return f"CAST((min(t), [{dims}]) AS {FIRST})"


def _scopes(e: Terms) -> str:
    """The checks' own scopes the session's events are in."""
    if not e.needs.scopes:
        return "CAST([] AS Array(String))"
    return "groupUniqArrayArray(_scopes)"


def _quality(bit: int) -> Callable[[Terms], str]:
    return lambda e: f"countIf(bitAnd(_quality, {bit}) != 0)"


COLUMNS: tuple[Column, ...] = (
    Column("first_seen", "Int64", MIN, lambda e: "min(t)"),
    Column("last_seen", "Int64", MAX, lambda e: "max(t)"),
    Column("scoped", "UInt8", MAX, lambda e: "max(in_scope)"),
    Column("scopes", "Array(String)", UNION, _scopes),
    Column(
        "roles",
        f"Array({ROLE})",
        CONCAT,
        lambda e: (
            f"CAST(groupArrayIf((t, _hash, _code, _flags, {e.id}), {e.kept}) AS Array({ROLE}))"
        ),
        events=True,
    ),
    # The session's rows of kept names and of the others, and each kept event's id: the
    # session's events, the rows written again.
    Column("role_rows", "UInt64", SUM, lambda e: "countIf(_kept = 1)"),
    Column("other_rows", "UInt64", SUM, lambda e: "countIf(_kept = 0)"),
    Column("role_ids", "Array(UInt64)", UNION, lambda e: "groupUniqArrayIf(_hash, _kept = 1)"),
    # The kept events of the names a summary reads, over the lookback (the state keeps every
    # kept name's: it does not know the scans).
    Column(
        "summed",
        f"Array({SUMMED})",
        CONCAT,
        lambda e: f"CAST(groupArrayIf((t, _code), {e.summarized}) AS Array({SUMMED}))",
    ),
    Column("first", FIRST, MIN, _first),
    # What data quality counts (QUALITY): a latency that is not a finite, non-negative
    # number, of a kept event; a payload that is not a JSON object, of any event; a name,
    # session id or payload that is not valid UTF-8.
    Column("latency_ignored", "UInt64", SUM, _quality(LATENCY_INVALID)),
    Column("not_object", "UInt64", SUM, _quality(NOT_OBJECT)),
    Column("not_utf8", "UInt64", SUM, _quality(NOT_UTF8)),
)
NAMES = tuple(c.name for c in COLUMNS)

# The report's `data_quality`: rows the checks ignore or keep with a caveat, per session from
# its merged row, summed over the sessions.
QUALITY: dict[str, str] = {
    # The same event id written more than once (retries); counted once everywhere else.
    "duplicate_rows": "role_rows - length(role_ids)",
    # Left out of latency checks.
    "latency_ignored": "latency_ignored",
    # Contract checks count it, others ignore it (a session start whose metadata cannot be
    # read loses the session id it carries: that must not go uncounted).
    "payload_not_json_object": "not_object",
    # Kept byte for byte.
    "invalid_utf8": "not_utf8",
    # Session ids over 1 KiB: kept (evidence shows them as they are).
    "session_id_over_1kib": "toUInt64(length(session_id) > 1024)",
}
# The session's events: each kept one once (a row written again is not another event), and
# the others.
EVENTS = "other_rows + length(role_ids)"


def aggregates(terms: Terms) -> str:
    """SQL: each column's aggregate over a session's events (a SELECT list)."""
    return ",\n    ".join(f"{c.aggregate(terms)} AS {c.name}" for c in COLUMNS)


def merged_rows(near: str = "") -> str:
    """SQL: each column merged over a session's partial rows (a SELECT list, grouped)."""
    return ",\n    ".join(f"{c.merge.over_rows(c.kept(c.name, near))} AS {c.name}" for c in COLUMNS)


# --- what a scan reads of the merged row ----------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """How one scan reads kept events: its name sets' masks per name code, its side sets."""

    masks: str  # SQL: the bound array of each kept name's mask in the scan (by code)
    mask: str  # SQL: the mask of a kept event `e` (ROLE) in the scan
    side: Callable[[str], str]  # SQL: a mask less the side sets' bits


def finalized(
    inputs: Mapping[str, Input], needs: Needs, reading: Reading, values: Values
) -> list[str]:
    """SQL: each kept event's mask in the scan (`_masks`), the events its figures read
    (`_roles`), its inputs and its data-quality counts, from its merged row (a SELECT list)."""
    seen = f"CAST((e.t, m, e.hash, bitTest(e.flags, 0)) AS {SEEN})"
    out = [
        f"{EVENTS} AS n_events",
        f"arrayMap(e -> {reading.mask}, roles) AS _masks",
        f"arrayFilter(x -> {reading.side('x.mask')} != 0,"
        f" arrayMap((e, m) -> {seen}, roles, _masks)) AS _roles",
        *(f"{sql} AS dq_{reason}" for reason, sql in QUALITY.items()),
    ]
    out += [f"{_input(item, needs, reading, values)} AS {alias}" for alias, item in inputs.items()]
    return out


def _events(bit: int, positive: bool = False) -> str:
    condition = f"bitTest(m, {bit})" + (" AND bitTest(e.flags, 0)" if positive else "")
    picked = f"arrayFilter((e, m) -> {condition}, roles, _masks)"
    return f"arrayMap(e -> CAST((e.t, e.hash, e.id) AS {EVENT}), {picked})"


def _input(item: Input, needs: Needs, reading: Reading, values: Values) -> str:
    match item:
        case SideTimes(bit):
            return f"arrayMap(e -> e.t, arrayFilter((e, m) -> bitTest(m, {bit}), roles, _masks))"
        case SideEvents(bit):
            return _events(bit)
        case SetEvents(bit, positive):
            return _events(bit, positive)
        case Scope(check_id, _):
            return f"toUInt8(has(scopes, {values(check_id, 'String')}))"
        case FirstDim(dim):
            return f"first.dims[{needs.dims.index(dim) + 1}]"
        case SetSummary(bit, what):
            kept = (
                f"arrayFilter(k -> bitTest(arrayElement({reading.masks}, k.code), {bit}), summed)"
            )
            if what == "count":
                return f"length({kept})"
            return f"{'arrayMin' if what == 'first' else 'arrayMax'}(arrayMap(k -> k.t, {kept}))"
        case _:
            assert_never(item)


def id_names(inputs: Iterable[Input], names_of: Callable[[int], Sequence[str]]) -> tuple[str, ...]:
    """The names whose events an input may name as evidence (their ids are kept)."""
    found: set[str] = set()
    for item in inputs:
        match item:
            case SideEvents(bit) | SetEvents(bit):
                found.update(names_of(bit))
            case SideTimes() | Scope() | FirstDim() | SetSummary():
                pass
            case _:
                assert_never(item)
    return tuple(sorted(found))


def summary_names(
    inputs: Iterable[Input], names_of: Callable[[int], Sequence[str]]
) -> tuple[str, ...]:
    """The names whose first and last times and counts over the lookback an input reads."""
    found: set[str] = set()
    for item in inputs:
        match item:
            case SetSummary(bit):
                found.update(names_of(bit))
            case SideTimes() | SideEvents() | SetEvents() | Scope() | FirstDim():
                pass
            case _:
                assert_never(item)
    return tuple(sorted(found))
