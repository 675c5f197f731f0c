"""A session scan's per-session level read from the session state (`source.state`).

The scan's typed inputs (`checks.scans.session`) are rendered from the
state's columns: a run reads the state rows of the hours its lookback
touches, never an event. Role and flagged events carry their times and are
kept when in `[at - lookback, at)`; the first and last time and the event
count of the two hours the lookback's ends cut come from their `times`. So
the numbers are those of the events of `[at - lookback, at)`, as the raw path
computes them (the one exception, a session's scope in a cut hour, is in
docs/sources.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from checks.base import Window
from checks.scans.session import (
    DATA_QUALITY,
    FirstDim,
    Input,
    NameSets,
    Scope,
    Seen,
    SessionScan,
    SideEvents,
    SideTimes,
)
from checks.sources import CompiledSource
from checks.state.layout import (
    BUCKET_MS,
    BUILT_FOR,
    INVALID_UTF8,
    LATENCY_INVALID,
    NOT_OBJECT,
    Needs,
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
    "duplicate_rows": DATA_QUALITY["duplicate_rows"],  # over `_roles`: the same expression
    "latency_ignored": _flagged(LATENCY_INVALID, role_events_only=True),
    "payload_not_json_object": _flagged(NOT_OBJECT),
    "invalid_utf8": _flagged(INVALID_UTF8),
    "session_id_over_1kib": DATA_QUALITY["session_id_over_1kib"],  # over the session id
}
assert QUALITY.keys() == DATA_QUALITY.keys(), "every data-quality count is read from the state"


def _input(item: Input) -> str:
    """SQL: a per-session input from the merged state (`_all`: (t, mask, id, has results))."""
    if isinstance(item, SideTimes):
        return f"arrayMap(x -> x.1, arrayFilter(x -> bitTest(x.2, {item.bit}), _all))"
    if isinstance(item, SideEvents):
        return f"arrayMap(x -> (x.1, x.3), arrayFilter(x -> bitTest(x.2, {item.bit}), _all))"
    if isinstance(item, Scope):
        return f"toUInt8(has(_scopes, {quoted(item.check_id)}))"
    if isinstance(item, Seen):
        seen = f"arrayFilter(x -> bitTest(x.2, {item.bit}), _all)"
        return f"(toUInt64(length({seen})), arrayMax(arrayMap(x -> x.1, {seen})))"
    assert isinstance(item, FirstDim)
    raise ValueError("the session state keeps no triage dimension (triage reads the events)")


def table_comment(store: Store, table: str) -> str | None:
    """The COMMENT of `table` (`db.name`, or a name in the current database); None: no table."""
    database, _, name = table.rpartition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE name = {t:String}"
        " AND database = if({db:String} = '', currentDatabase(), {db:String})",
        {"t": name, "db": database},
    ).rows
    return str(found[0][0]) if found else None


def verify(store: Store, source: CompiledSource, scan: SessionScan) -> None:
    """Refuse a state whose view was built for other checks than `scan` needs.

    The view keeps the events of the names, the payload fields and the
    session filters of the config it was applied with (its table's COMMENT
    says which); a scan needing an event name, a field or a filter it does
    not keep would judge from a state that lacks them. Raises StoreError
    naming what differs, so those checks are `error`, never a quiet wrong
    verdict. A state keeping more than the scan needs is read.
    """
    comment = table_comment(store, source.state)
    if comment is None:
        return  # the scan names the missing table itself
    want = Needs.of([scan]).built_for(source.session_filter)
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


def render(scan: SessionScan, source: CompiledSource, window: Window) -> tuple[str, dict[str, Any]]:
    """The whole session scan with its per-session level read from `source.state`.

    Returns the SQL and the parameters it adds to the scan's own.
    """

    def matches(i: int) -> str:
        return (
            f"arrayExists(p -> p.1 = {{skip{i}_field:String}}"
            f" AND has({{skip{i}_values:Array(String)}}, p.2), e.5)"
        )

    event_mask = scan.sets.mask(NameSets.name_mask("e.2"), matches)
    flag_mask = scan.sets.roles(NameSets.name_mask("f.2"))
    inner = [f"arrayFilter(x -> {scan.sets.roles('x.2')} != 0, _all) AS _roles"]
    inner += [f"{expr} AS dq_{reason}" for reason, expr in QUALITY.items()]
    inner += [f"{_input(item)} AS {alias}" for alias, item in scan.inputs.items()]
    aggregates = ",\n    ".join(inner)

    def kept(t: str) -> str:
        return f"{{lb_ms:Int64}} <= {t} AND {t} < {{at_ms:Int64}}"

    rest = "scoped, scopes, events, flagged"
    where = f"FROM {source.state} WHERE source = {{state_source:String}} AND"
    whole = "bucket >= {state_from:Int64} AND bucket < {state_until:Int64}"
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
    {aggregates}
FROM (
    SELECT if(sid IN {{ignore_sessions:Array(String)}}, '', sid) AS session_id, f, l, n, {rest}
    FROM (
        SELECT session_id AS sid, CAST(first_seen AS Int64) AS f, CAST(last_seen AS Int64) AS l,
            CAST(n_events AS UInt64) AS n, {rest}
        {where} {whole}
        UNION ALL
        SELECT session_id AS sid, if(n > 0, arrayMin(_in), {2**63 - 1}) AS f,
            if(n > 0, arrayMax(_in), {-(2**63)}) AS l, toUInt64(length(_in)) AS n, {rest}
        FROM (
            SELECT *, arrayFilter(x -> {kept("x")}, times) AS _in
            {where} bucket >= {{edge_from:Int64}} AND bucket < {{at_ms:Int64}}
              AND NOT ({whole})
        )
    )
)
GROUP BY session_id
HAVING n_events > 0"""
    return scan.around(sql), {"state_source": source.name, **bounds(window)}
