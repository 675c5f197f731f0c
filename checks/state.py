"""Session state kept at insert time: what the session rules need, per source and session.

`schema apply --materialize` adds a table `<store.database>.session_state`
(an AggregatingMergeTree) fed by a materialized view on the source table:
per source, hour bucket and session (the session id before the ignore
list), the first and last event time, the event count, whether an event is
in scope (`source.session_filter`, each check's own session filter), the
session's role events (every event named in a set some session rule reads,
as `(t, name, event_id, has results, payload fields a skip filter reads)`)
the events a data-quality count flags, and every event's time. A config
with `source.state = "<database>.session_state"` then judges the coverage,
rate and freshness checks from it (`per_session`): a run reads the state
rows of the hours its lookback touches, never an event. Role and flagged
events carry their times and are kept when in `[at - lookback, at)`; the
first and last time and the count of the two hours the lookback's ends cut
come from their `times`. So the numbers are those of the events of
`[at - lookback, at)`, as the raw path computes them (the one exception, a
session's scope in a cut hour, is in docs/sources.md).

Role events and flagged events are kept in `groupUniqArray` states: the same
row written twice (a retry; a ReplacingMergeTree source's duplicate before
it merges, or the backfill overlapping the view) is one element, counted
once, and the state stays bounded whatever the retries. An aggregate over
distinct tuples, not `argMax` by event id: the raw path already tells two
rows of one id with different times apart (each is judged), and a tuple set
keeps exactly that.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checks.base import Window
from checks.kinds import CheckSpec, Coverage
from checks.sessions import PerSession, SessionQueryBuilder, build, session_checks
from checks.sources import CompiledSource, compile_source, unbounded_sql
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import rfc3339, to_ms

STATE_TABLE = "session_state"
STATE_VIEW = "session_state_mv"
BUCKET_MS = 60 * 60 * 1000  # a state row per session and hour

# What the data-quality counts flag, one bit each (`flagged`).
NOT_OBJECT, INVALID_UTF8, LATENCY_INVALID = 1, 2, 4

EVENT = "Tuple(Int64, String, String, UInt8, Array(Tuple(String, String)))"
FLAGGED = "Tuple(Int64, String, String, UInt8)"
COLUMNS: dict[str, str] = {
    "source": "LowCardinality(String)",
    "bucket": "Int64",  # epoch ms at the start of the bucket
    "session_id": "String",  # before the ignore list
    "first_seen": "SimpleAggregateFunction(min, Int64)",
    "last_seen": "SimpleAggregateFunction(max, Int64)",
    "n_events": "SimpleAggregateFunction(sum, UInt64)",
    "scoped": "SimpleAggregateFunction(max, UInt8)",
    "scopes": "SimpleAggregateFunction(groupUniqArrayArray, Array(String))",
    # Every event's time: read only for the two buckets the lookback's ends cut.
    "times": "SimpleAggregateFunction(groupArrayArray, Array(Int64))",
    "events": f"AggregateFunction(groupUniqArray, {EVENT})",
    "flagged": f"AggregateFunction(groupUniqArray, {FLAGGED})",
}
STATE_ROWS = (
    "scoped",
    "first_seen",
    "last_seen",
    "n_events",
    "scopes",
    "times",
    "events",
    "flagged",
)


@dataclass(frozen=True)
class Needs:
    """What the state keeps of each event, for a set of session checks."""

    names: tuple[str, ...]  # the event names some session rule reads
    skips: tuple[tuple[str, tuple[str, ...]], ...]  # (payload field, the names it is read for)
    scopes: tuple[str, ...]  # the checks with a session filter of their own

    @classmethod
    def of(cls, b: SessionQueryBuilder, scopes: Sequence[str]) -> Needs:
        names: set[str] = set()
        skips: dict[str, set[str]] = {}
        for group, skip, _ in b.sets.bits:
            names.update(group)
            if skip is not None:
                skips.setdefault(skip.field, set()).update(group)
        return cls(
            tuple(sorted(names)),
            tuple((f, tuple(sorted(n))) for f, n in sorted(skips.items())),
            tuple(scopes),
        )


# The state table's COMMENT: this mark, then what its view keeps (`built_for`), as JSON.
BUILT_FOR = "memory-watchdog session state for: "


def built_for(needs: Needs, scopes: Mapping[str, str], session_filter: str) -> dict[str, Any]:
    """What a state keeps, as recorded on its table and compared on every read (`verify`)."""
    return {
        "names": list(needs.names),
        "skips": {field: list(names) for field, names in needs.skips},
        "scopes": {check: scopes[check] for check in needs.scopes},
        "session_filter": session_filter,
    }


def _literal(value: str | Sequence[str]) -> str:
    """A string or a list of strings as a ClickHouse literal: a view's definition holds no
    bound parameter."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    items = ", ".join(_literal(v) for v in value)
    return f"CAST([{items}] AS Array(String))"


def rows_sql(events: str, needs: Needs) -> str:
    """Per session and bucket: the state's columns over the normalized `events` relation."""
    names = _literal(list(needs.names))
    skips = [
        f"if(name IN {_literal(list(ns))},"
        f" ({_literal(field)}, JSONExtractString(payload,"
        f" {_literal(field)})), ('', ''))"
        for field, ns in needs.skips
    ]
    skipped = f"arrayFilter(p -> p.1 != '', [{', '.join(skips)}])" if skips else "[]"
    scopes = [f"if(scope_{name} != 0, {_literal(name)}, '')" for name in needs.scopes]
    scoped = f"arrayFilter(x -> x != '', [{', '.join(scopes)}])" if scopes else "[]"
    flags = (
        f"toUInt8(if(payload_is_object, 0, {NOT_OBJECT})"
        f" + if(isValidUTF8(name) AND isValidUTF8(_session_raw) AND payload_is_utf8,"
        f" 0, {INVALID_UTF8}) + if(latency_invalid AND name IN {names}, {LATENCY_INVALID}, 0))"
    )
    return f"""
    SELECT
        _session_raw AS sid,
        intDiv(t, {BUCKET_MS}) * {BUCKET_MS} AS bucket,
        max(in_scope) AS scoped,
        min(t) AS first_seen,
        max(t) AS last_seen,
        count() AS n_events,
        groupUniqArrayArray(CAST({scoped} AS Array(String))) AS scopes,
        groupArray(t) AS times,
        groupUniqArrayStateIf((t, CAST(name AS String), CAST(event_id AS String),
            toUInt8(ifNull(result_count, 0) > 0),
            CAST({skipped} AS Array(Tuple(String, String)))), name IN {names}) AS events,
        groupUniqArrayStateIf((t, CAST(name AS String), CAST(event_id AS String), _flags),
            _flags != 0) AS flagged
    FROM (SELECT *, {flags} AS _flags FROM {events})
    GROUP BY sid, bucket"""


# --- schema apply --materialize --------------------------------------------------------


def session_scopes(specs: Sequence[CheckSpec]) -> dict[str, str]:
    """The session filters of checks that narrow their own sessions, by check id."""
    return {
        spec.id: spec.params.session_filter
        for spec in specs
        if isinstance(spec.params, Coverage) and spec.params.session_filter
    }


def _needs_for(specs: Sequence[CheckSpec], scopes: Sequence[str]) -> Needs:
    b, _ = build(session_checks([s for s in specs if s.enabled]))
    return Needs.of(b, scopes)


def _view_select(
    settings: Settings,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    scopes: Mapping[str, str],
    table: str,
    where: str = "",
) -> str:
    needs = _needs_for(specs, list(scopes))
    events = f"({unbounded_sql(settings.source, present, scopes, table, where)})"
    key = _literal(settings.source.display_name)
    rows = rows_sql(events, needs)
    columns = ", ".join(STATE_ROWS)
    return f"SELECT {key} AS source, bucket, sid AS session_id, {columns}\nFROM ({rows}\n)"


@dataclass(frozen=True)
class StatePlan:
    """Where the state table goes: `database`, the source table(s), the cluster."""

    database: str
    source_table: str
    source_local: str
    ttl: str | None
    cluster: str | None

    @property
    def table(self) -> str:
        return f"{self.database}.{STATE_TABLE}"

    @property
    def storage(self) -> str:
        return self.table + ("_local" if self.cluster else "")


def state_statements(
    settings: Settings,
    plan: StatePlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    scopes: Mapping[str, str],
    *,
    since: datetime,
    until: datetime,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(purpose, SQL, parameters): the state table, its view, the backfill."""
    on = f" ON CLUSTER {plan.cluster}" if plan.cluster else ""
    ttl = f"\nTTL toDateTime(intDiv(bucket, 1000)) + {plan.ttl}" if plan.ttl else ""
    columns = ",\n".join(f"    {name} {typ}" for name, typ in COLUMNS.items())
    kept = built_for(_needs_for(specs, list(scopes)), scopes, settings.source.session_filter or "")
    comment = f"\nCOMMENT {_literal(BUILT_FOR + json.dumps(kept, sort_keys=True))}"
    layout = f"PARTITION BY intDiv(bucket, 86400000)\nORDER BY (source, bucket, session_id){ttl}{comment}"
    out: list[tuple[str, str, dict[str, Any]]] = []
    if plan.cluster:
        local = f"{STATE_TABLE}_local"
        zk_path = f"/clickhouse/tables/{{shard}}/{plan.database}/{local}"
        out.append(
            (
                "The per-session state on every shard, replicated.",
                f"CREATE TABLE IF NOT EXISTS {plan.storage}{on}\n(\n{columns}\n)\n"
                f"ENGINE = ReplicatedAggregatingMergeTree('{zk_path}', '{{replica}}')\n{layout}",
                {},
            )
        )
        out.append(
            (
                "What source.state reads: all shards, sessions sharded by id.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}{on} AS {plan.storage}\n"
                f"ENGINE = Distributed('{plan.cluster}', '{plan.database}', '{local}',"
                f" cityHash64(session_id)){comment}",
                {},
            )
        )
    else:
        out.append(
            (
                "The per-session state (source.state): per session and hour,"
                " what the session checks read.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}\n(\n{columns}\n)\n"
                f"ENGINE = AggregatingMergeTree\n{layout}",
                {},
            )
        )
    view = _view_select(settings, present, specs, scopes, plan.source_local)
    out.append(
        (
            "Every row inserted into the source from now on updates its session's state.",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {plan.database}.{STATE_VIEW}{on}"
            f" TO {plan.table}\nAS {view}",
            {},
        )
    )
    ts = (
        f"toDateTime64({settings.source.columns.get('ts') or _raw_ts(settings, present)}, 3, 'UTC')"
    )
    bounds = (
        f"{ts} >= fromUnixTimestamp64Milli({{backfill_from_ms:Int64}}, 'UTC')"
        f" AND {ts} < fromUnixTimestamp64Milli({{backfill_until_ms:Int64}}, 'UTC')"
    )
    backfill = _view_select(settings, present, specs, scopes, plan.source_table, bounds)
    out.append(
        (
            f"Backfill of the state: the source's rows from {rfc3339(since)} until the view"
            f" was created ({rfc3339(until)}).",
            f"INSERT INTO {plan.table} (source, bucket, session_id, {', '.join(STATE_ROWS)})"
            f"\n{backfill}",
            {"backfill_from_ms": to_ms(since), "backfill_until_ms": to_ms(until)},
        )
    )
    return out


def _raw_ts(settings: Settings, present: Mapping[str, str] | None) -> str:
    return compile_source(settings.source, present).columns["ts"]


# --- reading -----------------------------------------------------------------------------


def table_comment(store: Store, table: str) -> str | None:
    """The COMMENT of `table` (`db.name`, or a name in the current database); None: no table."""
    database, _, name = table.rpartition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE name = {t:String}"
        " AND database = if({db:String} = '', currentDatabase(), {db:String})",
        {"t": name, "db": database},
    ).rows
    return str(found[0][0]) if found else None


def verify(store: Store, source: CompiledSource, specs: Sequence[CheckSpec]) -> None:
    """Refuse a state whose view was built for other checks than `specs` need.

    The view keeps the role events of the names, the payload fields and the
    session filters of the config it was applied with (its table's COMMENT
    says which); a run needing an event name, a field or a filter it does not
    keep would judge from a state that lacks them. Raises StoreError naming
    what differs, so those checks are `error`, never a quiet wrong verdict.
    """
    comment = table_comment(store, source.state)
    if comment is None:
        return  # the session query names the missing table itself
    scopes = session_scopes(specs)
    want = built_for(_needs_for(specs, list(scopes)), scopes, source.session_filter)
    if not comment.startswith(BUILT_FOR):
        problems = ["its table records no checks (made by hand or by an earlier version)"]
    else:
        problems = _differences(json.loads(comment.removeprefix(BUILT_FOR)), want)
    if problems:
        raise StoreError(
            store.url.masked,
            f"source.state: {source.state} was built for other checks ({'; '.join(problems)}):"
            " drop it and its view, then run `memory-watchdog schema apply --materialize`"
            " again (docs/sources.md)",
        )


def _differences(built: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """What `want` needs that the state recorded as `built` does not keep."""
    problems = []
    names = sorted(set(want["names"]) - set(built.get("names", [])))
    if names:
        problems.append(f"it keeps no {', '.join(names)} events")
    for field, wanted in want["skips"].items():
        lacking = sorted(set(wanted) - set(built.get("skips", {}).get(field, [])))
        if lacking:
            problems.append(f"it keeps no payload {field} of {', '.join(lacking)}")
    for check, predicate in want["scopes"].items():
        if built.get("scopes", {}).get(check) != predicate:
            problems.append(f"the session_filter of {check} changed")
    if built.get("session_filter", "") != want["session_filter"]:
        problems.append("source.session_filter changed")
    return problems


_SIDE = re.compile(r"_side_(times|events)_(\d+)")
_SCOPE = re.compile(r"max\(scope_(\w+)\)")


def _mask(b: SessionQueryBuilder, name: str, skips: str | None) -> str:
    """SQL: the mask of an event named `name` (the session query's `_m`), from the state."""
    m0 = f"transform({name}, {{role_names:Array(String)}}, {{role_masks:Array(UInt64)}}, toUInt64(0))"
    mask = m0
    i = 0
    while skips is not None and f"skip{i}_mask" in b.params:
        bits = f"{{skip{i}_mask:UInt64}}"
        excluded = (
            f"bitAnd({m0}, {bits}) != 0 AND arrayExists(p -> p.1 = {{skip{i}_field:String}}"
            f" AND has({{skip{i}_values:Array(String)}}, p.2), {skips})"
        )
        mask = f"bitAnd({mask}, bitNot(if({excluded}, {bits}, toUInt64(0))))"
        i += 1
    return mask


def _roles_only(b: SessionQueryBuilder, mask: str) -> str:
    """SQL: `mask` less the side sets' bits (the session query's `_mr`)."""
    return f"bitAnd({mask}, bitNot({{side_mask:UInt64}}))" if "side_mask" in b.params else mask


def _inner(b: SessionQueryBuilder) -> dict[str, str]:
    """The session query's per-session aggregates, computed from the merged state."""
    out: dict[str, str] = {}
    for alias, expr in b.inner.items():
        side = _SIDE.fullmatch(alias)
        scope = _SCOPE.fullmatch(expr)
        if alias == "_roles":
            out[alias] = f"arrayFilter(x -> {_roles_only(b, 'x.2')} != 0, _all)"
        elif side is not None:
            picked = f"arrayFilter(x -> bitTest(x.2, {side.group(2)}), _all)"
            item = "x.1" if side.group(1) == "times" else "(x.1, x.3)"
            out[alias] = f"arrayMap(x -> {item}, {picked})"
        elif alias in ("dq_duplicate_rows", "dq_session_id_over_1kib"):
            out[alias] = expr  # over `_roles` and the session id: the same expression
        elif alias == "dq_payload_not_json_object":
            out[alias] = (
                f"toUInt64(length(arrayFilter(f -> bitAnd(f.1, {NOT_OBJECT}) != 0, _flagged)))"
            )
        elif alias == "dq_invalid_utf8":
            out[alias] = (
                f"toUInt64(length(arrayFilter(f -> bitAnd(f.1, {INVALID_UTF8}) != 0, _flagged)))"
            )
        elif alias == "dq_latency_ignored":
            out[alias] = (
                f"toUInt64(length(arrayFilter(f -> bitAnd(f.1, {LATENCY_INVALID}) != 0"
                " AND f.2 != 0, _flagged)))"
            )
        elif scope is not None:
            out[alias] = f"toUInt8(has(_scopes, '{scope.group(1)}'))"
        else:
            raise ValueError(f"the session state holds nothing to compute {alias} from")
    return out


def bounds(window: Window) -> dict[str, int]:
    """The buckets wholly inside `[lb, at)`, and those the lookback's two ends cut.

    `[state_from, state_until)` holds the starts of the whole buckets; the
    others of `[edge_from, at)` are cut by `lb` or `at` and are read with their
    events' times. Without a whole bucket every bucket is read that way.
    """
    p = window.params()
    lb, at = p["lb_ms"], p["at_ms"]
    first = -(-lb // BUCKET_MS) * BUCKET_MS
    last = at // BUCKET_MS * BUCKET_MS
    if first >= last:
        first = last
    return {"edge_from": lb // BUCKET_MS * BUCKET_MS, "state_from": first, "state_until": last}


def per_session(source: CompiledSource) -> PerSession:
    """The session query's per-session level read from `source.state`.

    The role and flagged events carry their times and are kept when in
    `[lb, at)`; the first and last time, the event count of a cut bucket come
    from its `times`. Whether a session is in scope is its bucket's (see docs/sources.md).
    """
    table = source.state

    def read(b: SessionQueryBuilder, window: Window) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {"state_source": source.name, **bounds(window)}

        def kept(t: str) -> str:
            return f"{{lb_ms:Int64}} <= {t} AND {t} < {{at_ms:Int64}}"

        event_mask = _mask(b, "e.2", "e.5")
        flag_mask = _roles_only(b, _mask(b, "f.2", None))
        inner = ",\n    ".join(f"{expr} AS {alias}" for alias, expr in _inner(b).items())
        rest = "scoped, scopes, events, flagged"
        where = "FROM {table} WHERE source = {{state_source:String}} AND "
        sql = f"""
SELECT
    session_id,
    max(scoped) AS scoped,
    min(f) AS first_seen,
    max(l) AS last_seen,
    sum(n) AS n_events,
    groupUniqArrayArray(scopes) AS _scopes,
    arrayMap(e -> (e.1, {event_mask}, e.3, e.4),
        arrayFilter(e -> {kept("e.1")}, groupUniqArrayMerge(events))) AS _all,
    arrayMap(f -> (f.4, {flag_mask}),
        arrayFilter(f -> {kept("f.1")}, groupUniqArrayMerge(flagged))) AS _flagged,
    {inner}
FROM (
    SELECT if(sid IN {{ignore_sessions:Array(String)}}, '', sid) AS session_id, f, l, n, {rest}
    FROM (
        SELECT session_id AS sid, CAST(first_seen AS Int64) AS f, CAST(last_seen AS Int64) AS l,
            CAST(n_events AS UInt64) AS n, {rest}
        {where.format(table=table)}bucket >= {{state_from:Int64}} AND bucket < {{state_until:Int64}}
        UNION ALL
        SELECT session_id AS sid, if(n > 0, arrayMin(_in), {2**63 - 1}) AS f,
            if(n > 0, arrayMax(_in), {-(2**63)}) AS l, toUInt64(length(_in)) AS n, {rest}
        FROM (
            SELECT *, arrayFilter(x -> {kept("x")}, times) AS _in
            {where.format(table=table)}bucket >= {{edge_from:Int64}} AND bucket < {{at_ms:Int64}}
              AND NOT (bucket >= {{state_from:Int64}} AND bucket < {{state_until:Int64}})
        )
    )
)
GROUP BY session_id
HAVING n_events > 0"""
        return sql, params

    return read
