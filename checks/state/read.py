"""A session scan's per-session level read from the session state: the one session row merged
over the stored hours of the lookback and the two hours its ends cut (aggregated from the
narrow table by time with the row's own definitions), evidence ids resolved from their hashes
there; so the numbers are those of the events (docs/sources.md#the-session-state-sourcestate).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from checks.base import Window
from checks.scans.row import COLUMNS, NAMES, ROLE, Needs, Terms, aggregates, merged_rows
from checks.scans.session import SessionScan
from checks.sources import CompiledSource, narrow_dims
from checks.state.layout import BUCKET_MS, BUILT_FOR, LAYOUT, built_for, recorded
from watchdog.core.errors import StoreError
from watchdog.core.store import Store


def table_comment(store: Store, table: str) -> str | None:
    """The COMMENT of `table` (`db.name`, or a name in the current database); None: no table."""
    facts = store.table_facts(table, "comment")
    return facts[0] if facts else None


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
        _same_source(store, source, built)
        problems = _differences(built, built_for(scan.needs(), source.session_filter, source.name))
    if problems:
        raise StoreError(
            store.url.masked,
            f"source.state: {source.state} was built for other checks ({'; '.join(problems)}):"
            " drop it, its view and the narrow table, then run `memory-watchdog schema apply"
            " --materialize` again (docs/sources.md)",
        )
    return recorded(built)


def _same_source(store: Store, source: CompiledSource, built: Mapping[str, Any]) -> None:
    """Raise StoreError unless the state keeps its rows under this source's name.

    Its rows carry the name of the source it was built from: read under another (the
    normalized preset on its narrow table names the source by that table), it holds no
    session of this one, and the session checks would judge nothing. A state recording no
    name was made before it was recorded, and is read.
    """
    kept = built.get("source", source.name)
    if kept != source.name:
        raise StoreError(
            store.url.masked,
            f"source.state: {source.state} holds the sessions of source {kept!r}, and this"
            f" source is named {source.name!r}: set source.name = {json.dumps(kept)}"
            " (docs/sources.md)",
        )


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
    bucket from which kept events are read.

    `[state_from, state_until)` holds the starts of the whole buckets, read from
    the state; `[lb, state_from)` and `[state_until, at)` are read from the
    narrow table. Without a whole bucket the whole lookback is read that way.
    Kept events are read from `near_from` (`near_ms` before the window) on: the
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


def resolve_ids(
    store: Store, source: CompiledSource, window: Window, scan: SessionScan, row: Mapping[str, Any]
) -> dict[str, Any]:
    """`row` with the event ids of its evidence, which the state knows by their hashes only.

    The narrow table answers by its time-first key: the rows at the evidence's own times (the
    state keeps each event's time beside its hash), of those the hashes wanted.
    """
    assert source.narrow is not None
    unresolved = [item for alias in scan.evidence for item in row[alias] if item["id"] == ""]
    if not unresolved:
        return dict(row)
    found = store.query(
        f"SELECT event_hash, any(event_id) FROM {source.narrow.table}"
        " WHERE toUnixTimestamp64Milli(ts) IN {times:Array(Int64)}"
        " AND event_hash IN {hashes:Array(UInt64)}"
        " AND ts >= fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
        " AND ts < fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC') GROUP BY event_hash",
        {
            "times": sorted({int(item["t"]) for item in unresolved}),
            "hashes": sorted({item["hash"] for item in unresolved}),
            **window.params(),
        },
    ).rows
    ids = {int(h): str(i) for h, i in found}
    resolved = dict(row)
    for alias in scan.evidence:
        resolved[alias] = [{**item, "id": ids.get(item["hash"], item["id"])} for item in row[alias]]
    return resolved


def render(
    scan: SessionScan, source: CompiledSource, window: Window, kept: Needs
) -> tuple[str, dict[str, Any]]:
    """The whole session scan with its per-session level read from `source.state`: parts of
    the one session row per stored hour, and per cut hour from the narrow table, merged.

    Returns the SQL and the parameters it adds to the scan's own. On a
    cluster where both tables are sharded by session, each shard merges and
    judges its own sessions.
    """
    assert source.narrow is not None, "the state is read with the narrow table beside it"
    # The cut hours aggregate the dimensions the state keeps (those of the config it was built
    # with, a raw preset's), not only the reading source's: the narrow table stores them all.
    narrow = replace(source.narrow, dims=narrow_dims(kept.dims))
    sharded = source.state_sharding
    on = None
    shards = narrow.on_shards()
    if sharded is not None and sharded.by_session and shards is not None:
        on, narrow = sharded, shards
    state = sharded.local if on is not None and sharded is not None else source.state
    near = "{near_from:Int64}"
    terms = Terms(kept, scan.bind, near=near)
    cut = (
        "(t >= {lb_ms:Int64} AND t < {state_from:Int64})"
        " OR (t >= {state_until:Int64} AND t < {at_ms:Int64})"
    )
    cut_rows = narrow.select(
        f"_session_raw AS sid,\n    {aggregates(terms)}",
        where=cut,
        group="sid",
        dims=bool(kept.dims),
        terms=terms.items(),
    )
    columns = ", ".join(NAMES)
    before = ", ".join(
        f"CAST([] AS Array({ROLE})) AS {c.name}" if c.events else c.name for c in COLUMNS
    )
    whole = "source = {state_source:String} AND bucket >= {state_from:Int64}"
    merged = f"""
SELECT
    session_id,
    {merged_rows(near)}
FROM (
    SELECT if(sid IN {{ignore_sessions:Array(String)}}, '', sid) AS session_id, {columns}
    FROM (
        -- whole hours before the one the kept events start in: their times and counts
        SELECT session_id AS sid, {before}
        FROM {state}
        WHERE {whole} AND bucket < least({{state_until:Int64}}, {{near_bucket:Int64}})
        UNION ALL
        -- whole hours from there on: their kept events too
        SELECT session_id AS sid, {columns}
        FROM {state}
        WHERE {whole} AND bucket >= {{near_bucket:Int64}} AND bucket < {{state_until:Int64}}
        UNION ALL
        -- the hours the lookback's ends cut, from the narrow table's events
        SELECT * FROM ({cut_rows}
        )
    )
)
GROUP BY session_id
HAVING role_rows + other_rows > 0"""
    params = {"state_source": source.name, **bounds(window, scan.near_ms)}
    return scan.around(scan.finalize(merged, kept), on=on), params
