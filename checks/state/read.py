"""A session scan's per-session level read from the session state: each typed input rendered from
the state's compact columns over the whole hours of the lookback, the two hours its ends cut
computed from the narrow table by time, evidence ids resolved from their hashes there; so the
numbers are those of the events (docs/sources.md#the-session-state-sourcestate).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from checks.base import Window
from checks.scans.binder import Binder
from checks.scans.session import (
    DATA_QUALITY,
    FirstDim,
    Input,
    Scope,
    SessionScan,
    SetEvents,
    SetSummary,
    SideEvents,
    SideTimes,
)
from checks.sources import CompiledSource
from checks.state.layout import (
    BUCKET_MS,
    BUILT_FOR,
    INVALID_UTF8,
    LATENCY_INVALID,
    LAYOUT,
    NOT_OBJECT,
    ROLE,
    Needs,
    rows_sql,
)
from watchdog.core.errors import StoreError
from watchdog.core.sql import quoted
from watchdog.core.store import Store


def _flagged(bit: int, role_events_only: bool = False) -> str:
    condition = f"bitAnd(f.1, {bit}) != 0" + (" AND f.2 != 0" if role_events_only else "")
    return f"toUInt64(length(arrayFilter(f -> {condition}, _flagged)))"


# Each data-quality count of the session scan, from the state: `_flagged` holds
# (flags, role mask) of the session's flagged events of the lookback.
QUALITY: dict[str, str] = {
    # Rows written twice are one element of the state (appended, deduplicated at read, as a
    # merge of the source would): what it counts is an id kept at two times.
    "duplicate_rows": "length(_roles) - length(arrayDistinct(arrayMap(x -> x.3, _roles)))",
    "latency_ignored": _flagged(LATENCY_INVALID, role_events_only=True),
    "payload_not_json_object": _flagged(NOT_OBJECT),
    "invalid_utf8": _flagged(INVALID_UTF8),
    "session_id_over_1kib": DATA_QUALITY["session_id_over_1kib"],  # over the session id
}
assert QUALITY.keys() == DATA_QUALITY.keys(), "every data-quality count is read from the state"


def table_comment(store: Store, table: str) -> str | None:
    """The COMMENT of `table` (`db.name`, or a name in the current database); None: no table."""
    database, _, name = table.rpartition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE name = {t:String}"
        " AND database = if({db:String} = '', currentDatabase(), {db:String})",
        {"t": name, "db": database},
    ).rows
    return str(found[0][0]) if found else None


def verify(store: Store, source: CompiledSource, scan: SessionScan) -> Needs:
    """What the state keeps, refused when its view was built for other checks than `scan` needs.

    The view keeps the events of the names, the payload filters, the session
    filters and the dimensions of the config it was applied with (its table's
    COMMENT says which, and its layout); a scan needing one it does not keep
    would judge from a state that lacks them. Raises StoreError naming what
    differs, so those checks are `error`, never a quiet wrong verdict. A state
    keeping more than the scan needs is read.
    """
    comment = table_comment(store, source.state)
    if comment is None:
        raise StoreError(store.url.masked, f"source.state: table {source.state} not found")
    if not comment.startswith(BUILT_FOR):
        built: dict[str, Any] = {}
        problems = ["its table records no checks (made by hand or by an earlier version)"]
    else:
        built = json.loads(comment.removeprefix(BUILT_FOR))
        problems = _differences(built, Needs.of([scan]).built_for(source.session_filter))
    if problems:
        raise StoreError(
            store.url.masked,
            f"source.state: {source.state} was built for other checks ({'; '.join(problems)}):"
            " drop it, its view and the narrow table, then run `memory-watchdog schema apply"
            " --materialize` again (docs/sources.md)",
        )
    return Needs.recorded(built)


def _differences(built: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """What `want` needs that the state recorded as `built` does not keep."""
    if built.get("layout") != LAYOUT:
        return ["it was made by another version of the watchdog, with another layout"]
    problems = []
    names = sorted(set(want["names"]) - set(built["names"]))
    if names:
        problems.append(f"it keeps no {', '.join(names)} events")
    kept = {(f, tuple(n), tuple(v)) for f, n, v in built["filters"]}
    for field, names, values in want["filters"]:
        if not any(f == field and v == tuple(values) and set(names) <= set(n) for f, n, v in kept):
            problems.append(f"it keeps no payload {field} of {', '.join(names)}")
    for check, predicate in want["scopes"].items():
        if built["scopes"].get(check) != predicate:
            problems.append(f"the session_filter of {check} changed")
    dims = sorted(set(want["dims"]) - set(built["dims"]))
    if dims:
        problems.append(f"it keeps no dimension {', '.join(dims)}")
    if built["session_filter"] != want["session_filter"]:
        problems.append("source.session_filter changed")
    return problems


def bounds(window: Window, near_ms: int = 0) -> dict[str, int]:
    """The buckets wholly inside `[lb, at)`, the two ranges the lookback's ends cut, and the
    bucket from which role events are read.

    `[state_from, state_until)` holds the starts of the whole buckets, read from
    the state; `[lb, state_from)` and `[state_until, at)` are read from the
    narrow table. Without a whole bucket the whole lookback is read that way.
    Role events are read from `near_from` (`near_ms` before the window) on: the
    buckets before `near_bucket` give their times and counts, not their events.
    """
    p = window.params()
    lb, at = p["lb_ms"], p["at_ms"]
    first = -(-lb // BUCKET_MS) * BUCKET_MS
    last = at // BUCKET_MS * BUCKET_MS
    if first >= last:
        first = last = at
    near_from = max(lb, p["ws_ms"] - near_ms)
    return {
        "state_from": first,
        "state_until": last,
        "near_from": near_from,
        "near_bucket": near_from // BUCKET_MS * BUCKET_MS,
    }


def _codes(scan: SessionScan, kept: Needs, bind: Binder) -> tuple[str, str, str]:
    """SQL: each name code's mask (a bound array), the mask of a kept role event `e` (t, hash,
    code, flags), and of a flagged one `f`.

    The code is the name's place in the names the state keeps; its mask is
    that name's in this scan, less the sets whose payload filter its flags say
    it matched.
    """
    names = scan.sets.params()
    by_name = dict(zip(names["role_names"], names["role_masks"], strict=True))
    masks = bind([by_name.get(name, 0) for name in kept.names], "Array(UInt64)")
    name_mask = f"arrayElement({masks}, e.3)"  # code 0: no element, 0
    flag_of = {(f.field, f.values): k + 1 for k, f in enumerate(kept.filters)}

    def matched(i: int) -> str:
        skip = list(scan.sets.filters())[i]
        return f"bitTest(e.4, {flag_of[(skip.field, tuple(sorted(set(skip.values))))]})"

    role_mask = scan.sets.mask(name_mask, matched)
    return masks, role_mask, scan.sets.roles(f"arrayElement({masks}, f.3)")


def _input(item: Input, kept: Needs, masks: str) -> str:
    """SQL: a per-session input from the merged state (`_all`: (t, mask, hash, results);
    `_firsts`, `_lasts`, `_counts`: per name code over the lookback)."""
    if isinstance(item, SetSummary):
        column = {"first": "_firsts", "last": "_lasts", "count": "_counts"}[item.what]
        values = (
            f"arrayFilter((v, c) -> bitTest(arrayElement({masks}, c), {item.bit}),"
            f" {column}.2, {column}.1)"
        )
        return f"{ {'first': 'arrayMin', 'last': 'arrayMax', 'count': 'arraySum'}[item.what] }({values})"
    if isinstance(item, SideTimes):
        return f"arrayMap(x -> x.1, arrayFilter(x -> bitTest(x.2, {item.bit}), _all))"
    if isinstance(item, SideEvents | SetEvents):
        positive = " AND x.4" if isinstance(item, SetEvents) and item.positive else ""
        picked = f"arrayFilter(x -> bitTest(x.2, {item.bit}){positive}, _all)"
        return f"arrayMap(x -> (x.1, x.3, ''), {picked})"
    if isinstance(item, Scope):
        return f"toUInt8(has(_scopes, {quoted(item.check_id)}))"
    assert isinstance(item, FirstDim)
    return f"_first.2[{kept.dims.index(item.dim) + 1}]"


def resolve_ids(
    store: Store, source: CompiledSource, window: Window, scan: SessionScan, row: Mapping[str, Any]
) -> dict[str, Any]:
    """`row` with the event ids of its evidence, which the state knows by their hashes only.

    The narrow table answers by its index on the hash, within the lookback.
    """
    assert source.narrow is not None
    wanted = {item[-2] for alias in scan.evidence for item in row[alias] if item[-1] == ""}
    if not wanted:
        return dict(row)
    found = store.query(
        f"SELECT event_hash, any(event_id) FROM {source.narrow.table}"
        " WHERE event_hash IN {hashes:Array(UInt64)}"
        " AND ts >= fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
        " AND ts < fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC') GROUP BY event_hash",
        {"hashes": sorted(wanted), **window.params()},
    ).rows
    ids = {int(h): str(i) for h, i in found}
    resolved = dict(row)
    for alias in scan.evidence:
        resolved[alias] = [(*item[:-1], ids.get(item[-2], item[-1])) for item in row[alias]]
    return resolved


def render(
    scan: SessionScan, source: CompiledSource, window: Window, kept: Needs
) -> tuple[str, dict[str, Any]]:
    """The whole session scan with its per-session level read from `source.state`.

    Returns the SQL and the parameters it adds to the scan's own.
    """
    assert source.narrow is not None, "the state is read with the narrow table beside it"
    bind = Binder("st")
    masks, event_mask, flag_mask = _codes(scan, kept, bind)
    inner = [f"arrayFilter(x -> {scan.sets.roles('x.2')} != 0, _all) AS _roles"]
    inner += [f"{expr} AS dq_{reason}" for reason, expr in QUALITY.items()]
    inner += [f"{_input(item, kept, masks)} AS {alias}" for alias, item in scan.inputs.items()]
    aggregates = ",\n    ".join(inner)
    kept_at = "{lb_ms:Int64} <= e.1 AND e.1 < {at_ms:Int64}"
    near = "{near_from:Int64} <= e.1 AND e.1 < {at_ms:Int64}"
    cut = (
        "(ts >= fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
        " AND ts < fromUnixTimestamp64Milli({state_from:Int64}, 'UTC'))"
        " OR (ts >= fromUnixTimestamp64Milli({state_until:Int64}, 'UTC')"
        " AND ts < fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC'))"
    )
    cut_rows = rows_sql(f"(SELECT * FROM {source.narrow.table} WHERE {cut})", kept)
    rows = "scoped, first_seen, last_seen, n_events, scopes, flagged, first, firsts, lasts, counts"
    no_roles = f"CAST([] AS Array({ROLE})) AS roles"
    sql = f"""
SELECT
    session_id,
    max(scoped) AS scoped,
    min(first_seen) AS first_seen,
    max(last_seen) AS last_seen,
    sum(n_events) AS n_events,
    groupUniqArrayArray(scopes) AS _scopes,
    arrayMap(e -> (e.1, {event_mask}, e.2, bitTest(e.4, 0)),
        arrayDistinct(arrayFilter(e -> {near}, groupArrayArray(roles)))) AS _all,
    arrayMap(f -> (f.4, {flag_mask}),
        arrayDistinct(arrayFilter(e -> {kept_at}, groupArrayArray(flagged)))) AS _flagged,
    min(first) AS _first,
    -- The hours' per-code figures side by side (concatenated, not merged: merging the maps
    -- per session costs several times what the few per-set figures below read of them).
    (groupArrayArray(firsts.1), groupArrayArray(firsts.2)) AS _firsts,
    (groupArrayArray(lasts.1), groupArrayArray(lasts.2)) AS _lasts,
    (groupArrayArray(counts.1), groupArrayArray(counts.2)) AS _counts,
    {aggregates}
FROM (
    SELECT if(sid IN {{ignore_sessions:Array(String)}}, '', sid) AS session_id, {rows}, roles
    FROM (
        -- whole hours before the one the role events start in: their times and counts
        SELECT session_id AS sid, {rows}, {no_roles}
        FROM {source.state}
        WHERE source = {{state_source:String}} AND bucket >= {{state_from:Int64}}
          AND bucket < least({{state_until:Int64}}, {{near_bucket:Int64}})
        UNION ALL
        -- whole hours from there on: their role events too
        SELECT session_id AS sid, {rows}, roles
        FROM {source.state}
        WHERE source = {{state_source:String}}
          AND bucket >= greatest({{state_from:Int64}}, {{near_bucket:Int64}})
          AND bucket < {{state_until:Int64}}
        UNION ALL
        SELECT sid, {rows}, roles FROM ({cut_rows})
    )
)
GROUP BY session_id
HAVING n_events > 0"""
    params = {"state_source": source.name, **bounds(window, scan.near_ms), **bind.values}
    return scan.around(sql), params
