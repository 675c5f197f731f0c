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
# A kept event as a scan's inputs read it: the name sets it is in (`mask`), whether it has
# results, its id.
SEEN = "Tuple(t Int64, mask UInt64, hash UInt64, results UInt8, id String)"
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
    `ids` the names whose events keep their id (those evidence may name; the
    state keeps none and resolves ids by hash).
    """

    needs: Needs
    values: Values
    near: str = ""
    ids: tuple[str, ...] = ()

    def items(self) -> list[tuple[str, str]]:
        """(alias, SQL) of each term, over the normalized event."""
        v, needs = self.values, self.needs
        code = f"toUInt16(indexOf({v.names(needs.names)}, name))" if needs.names else "0"
        matched = [
            f"bitShiftLeft(toUInt8(name IN {v.names(f.names)} AND"
            f" JSONExtractString(payload, {v(f.field, 'String')}) IN {v.names(f.values)}), {k + 1})"
            for k, f in enumerate(needs.filters)
        ]
        flags = " + ".join(["toUInt8(ifNull(result_count, 0) > 0)", *matched])
        scoped = ", ".join(
            f"if(scope_{check} != 0, {v(check, 'String')}, '')" for check, _ in needs.scopes
        )
        dims = ", ".join(f"dim_{d}" for d in needs.dims)
        kept_id = f"if(name IN {v.names(self.ids)}, event_id, '')" if self.ids else "''"
        return [
            ("_code", code),
            ("_hash", "cityHash64(event_id)"),
            ("_flags", f"if(_code != 0, toUInt8({flags}), toUInt8(0))"),
            ("_id", kept_id),
            ("_scopes", f"CAST(arrayFilter(x -> x != '', [{scoped}]) AS Array(String))"),
            ("_dims", f"CAST([{dims}] AS Array(String))"),
            (
                "_quality",
                f"toUInt8(if(_code != 0 AND latency_invalid != 0, {LATENCY_INVALID}, 0)"
                f" + if(payload_is_object = 0, {NOT_OBJECT}, 0) + if(isValidUTF8(name)"
                f" AND isValidUTF8(session_id) AND payload_is_utf8 != 0, 0, {NOT_UTF8}))",
            ),
        ]

    @property
    def kept(self) -> str:
        """SQL: the event is kept with its time (a kept name, near enough)."""
        return "_code != 0" + (f" AND t >= {self.near}" if self.near else "")


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
MIN_MAP = Merge("minMap", "minMap({0})", "arrayReduce('minMap', {0})")
MAX_MAP = Merge("maxMap", "maxMap({0})", "arrayReduce('maxMap', {0})")
SUM_MAP = Merge("sumMap", "sumMap({0})", "arrayReduce('sumMap', {0})")


@dataclass(frozen=True)
class Column:
    """One column of the session row: its type, its aggregate over events, its merges.

    `merge` combines the parts of one read (the whole lookback, a backtest's
    pieces, the hours the lookback cuts); `stored` is how the session state
    merges its stored parts, in the background and when it is read (default:
    `merge`). Where they differ, the state holds a set: a row written twice
    is one element of it, as it is of the source once ClickHouse merged the
    copies (docs/sources.md#the-session-state-sourcestate). `events`: it holds
    kept events by time, so a driver merges only those from near the window
    on (`Terms.near`, `Column.kept`).
    """

    name: str
    type: str
    merge: Merge
    aggregate: Callable[[Terms], str]
    events: bool = False
    stored_merge: Merge | None = None

    @property
    def stored(self) -> str:
        """The type of its column in the session state."""
        return f"SimpleAggregateFunction({self.on_store.stored}, {self.type})"

    @property
    def on_store(self) -> Merge:
        """How stored parts of it merge."""
        return self.stored_merge or self.merge

    def kept(self, values: str, near: str) -> str:
        """SQL: partial values `values` of it, the kept events from `near` on when it has events."""
        if not self.events or not near:
            return values
        return f"arrayFilter(e -> e.t >= {near}, {values})"


# The key of a kept event as data quality counts it, and of an event it flags (its reasons:
# the QUALITY bits below).
KEY = "Tuple(hash UInt64, t Int64)"
FLAGGED = "Tuple(hash UInt64, t Int64, reasons UInt8)"
LATENCY_INVALID, NOT_OBJECT, NOT_UTF8 = 1, 2, 4

COLUMNS: tuple[Column, ...] = (
    Column("first_seen", "Int64", MIN, lambda e: "min(t)"),
    Column("last_seen", "Int64", MAX, lambda e: "max(t)"),
    # Each event once: a row written again at the same time is not another event (as the
    # source holds it once merged, and a ReplacingMergeTree does within one insert).
    Column("n_events", "UInt64", SUM, lambda e: "uniqExact(_hash, t)"),
    Column("scoped", "UInt8", MAX, lambda e: "max(in_scope)"),
    Column("scopes", "Array(String)", UNION, lambda e: "groupUniqArrayArray(_scopes)"),
    Column(
        "roles",
        f"Array({ROLE})",
        CONCAT,
        lambda e: f"groupArrayIf(CAST((t, _hash, _code, _flags, _id) AS {ROLE}), {e.kept})",
        events=True,
        stored_merge=UNION,
    ),
    # Every kept event of the lookback by its key: the rows written again (data quality).
    Column(
        "role_keys",
        f"Array({KEY})",
        CONCAT,
        lambda e: f"groupArrayIf(CAST((_hash, t) AS {KEY}), _code != 0)",
        stored_merge=UNION,
    ),
    # The events data quality flags, with their reasons (rare: a small array).
    Column(
        "flagged",
        f"Array({FLAGGED})",
        CONCAT,
        lambda e: f"groupArrayIf(CAST((_hash, t, _quality) AS {FLAGGED}), _quality != 0)",
        stored_merge=UNION,
    ),
    Column("first", FIRST, MIN, lambda e: f"min(CAST((t, _dims) AS {FIRST}))"),
    # Per name code over the lookback: its first and last time and its count.
    Column(
        "firsts", "Map(UInt16, Int64)", MIN_MAP, lambda e: "minMapIf(map(_code, t), _code != 0)"
    ),
    Column("lasts", "Map(UInt16, Int64)", MAX_MAP, lambda e: "maxMapIf(map(_code, t), _code != 0)"),
    Column(
        "counts",
        "Map(UInt16, UInt64)",
        SUM_MAP,
        lambda e: "sumMapIf(map(_code, toUInt64(1)), _code != 0)",
    ),
)
NAMES = tuple(c.name for c in COLUMNS)


def _flagged(reason: int) -> str:
    return f"toUInt64(arrayCount(f -> bitAnd(f.reasons, {reason}) != 0, flagged))"


# The report's `data_quality`: rows the checks ignore or keep with a caveat, per session from
# its merged row, summed over the sessions.
QUALITY: dict[str, str] = {
    # The same event id written more than once (retries); counted once everywhere else.
    "duplicate_rows": "length(role_keys) - length(arrayDistinct(arrayMap(k -> k.hash, role_keys)))",
    # A latency that is not a finite, non-negative number, of a kept event: left out.
    "latency_ignored": _flagged(LATENCY_INVALID),
    # A payload that is not a JSON object, of any event: contract checks count it, others
    # ignore it (a session start whose metadata cannot be read loses the session id it
    # carries: that must not go uncounted).
    "payload_not_json_object": _flagged(NOT_OBJECT),
    # A name, session id or payload that is not valid UTF-8: kept byte for byte.
    "invalid_utf8": _flagged(NOT_UTF8),
    # Session ids over 1 KiB: kept (evidence shows them as they are).
    "session_id_over_1kib": "toUInt64(length(session_id) > 1024)",
}


def aggregates(terms: Terms) -> str:
    """SQL: each column's aggregate over a session's events (a SELECT list)."""
    return ",\n    ".join(f"{c.aggregate(terms)} AS {c.name}" for c in COLUMNS)


def merged_rows(near: str = "") -> str:
    """SQL: each column merged over a session's stored partial rows (a SELECT list, grouped)."""
    return ",\n    ".join(
        f"{c.on_store.over_rows(c.kept(c.name, near))} AS {c.name}" for c in COLUMNS
    )


# --- what a scan reads of the merged row ----------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """How one scan reads kept events: its name sets' masks per name code, its side sets."""

    masks: str  # SQL: the bound array of each kept name's mask in the scan (by code)
    seen: str  # SQL: a kept event `e` (ROLE) as the scan sees it (SEEN)
    side: Callable[[str], str]  # SQL: a mask less the side sets' bits


def finalized(
    inputs: Mapping[str, Input], needs: Needs, reading: Reading, values: Values
) -> list[str]:
    """SQL: the session's kept events as the scan sees them (`_all`, `_roles`), its inputs and
    its data-quality counts, from its merged row (a SELECT list)."""
    out = [
        f"arrayMap(e -> {reading.seen}, roles) AS _all",
        f"arrayFilter(x -> {reading.side('x.mask')} != 0, _all) AS _roles",
        *(f"{sql} AS dq_{reason}" for reason, sql in QUALITY.items()),
    ]
    out += [f"{_input(item, needs, reading, values)} AS {alias}" for alias, item in inputs.items()]
    return out


def _events(bit: int, positive: bool = False) -> str:
    condition = f"bitTest(x.mask, {bit})" + (" AND x.results" if positive else "")
    return (
        f"arrayMap(x -> CAST((x.t, x.hash, x.id) AS {EVENT}), arrayFilter(x -> {condition}, _all))"
    )


def _input(item: Input, needs: Needs, reading: Reading, values: Values) -> str:
    match item:
        case SideTimes(bit):
            return f"arrayMap(x -> x.t, arrayFilter(x -> bitTest(x.mask, {bit}), _all))"
        case SideEvents(bit):
            return _events(bit)
        case SetEvents(bit, positive):
            return _events(bit, positive)
        case Scope(check_id, _):
            return f"toUInt8(has(scopes, {values(check_id, 'String')}))"
        case FirstDim(dim):
            return f"first.dims[{needs.dims.index(dim) + 1}]"
        case SetSummary(bit, what):
            column, pick = {
                "first": ("firsts", "arrayMin"),
                "last": ("lasts", "arrayMax"),
                "count": ("counts", "arraySum"),
            }[what]
            kept = (
                f"mapFilter((c, v) -> bitTest(arrayElement({reading.masks}, c), {bit}), {column})"
            )
            return f"{pick}(mapValues({kept}))"
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
