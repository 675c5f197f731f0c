"""The session scan over many windows in one pass: the one session row per piece, merged per window.

One check reads `[at - lookback, at)` and groups its events by session
(`SessionScan.render_raw`); many windows read the span of all their
lookbacks once, the events grouped by session and by *piece*, the pieces
being the intervals between consecutive window bounds (every window's
lookback start and end), so that each window's read range is a union of
whole pieces. Each piece is one partial session row (`checks.scans.row`);
each session then gets one row per window whose read range holds any of its
events (`_w`), its columns merged over those pieces only by each column's own
merge, which is what the single window's read computes. The levels above
(the inputs, the figures, then the totals, one row per window) are the
scan's own (`SessionScan.finalize`, `SessionScan.around`), the window's
bounds those of each row. It is cheap because every column is merged per
window before the rows are made (small arrays of the pieces' values), and
the kept events are merged only for the windows the session may have
something due in, from `near_ms` before each window on: a window the
session's last event comes before gets none, and its row holds only numbers
(most of a session's windows: they read it for the lookback's counts and
summaries only). The pass and what it costs:
docs/performance.md#backtest-one-pass-over-a-period.
"""

from __future__ import annotations

from typing import Any

from checks.scans.row import COLUMNS, NAMES, Column, aggregates
from checks.scans.session import SessionScan
from checks.scans.windows import Windows
from checks.sources import CompiledSource


def _by_window(c: Column, ws: str) -> str:
    """SQL: the column's value for each window of `_wl`, from the session's pieces (`_g<name>`
    the pieces' values, `_masks` which pieces each window reads)."""
    values = f"_g{c.name}"
    # Most sessions lie in one piece, read whole by every window that reads it.
    whole = f"{values}[1]"
    merged = c.merge.over_array(f"arrayFilter((x, k) -> k, {values}, m)")
    if not c.events:
        each = f"arrayMap(m -> {merged}, _masks)"
        return f"if(_one, arrayWithConstant(length(_wl), {whole}), {each}) AS _b{c.name}"
    near = f"{ws}[i] - {{near_ms:Int64}}"
    # The kept events only for the first windows of `_wl` (those the session may have
    # something due in, `_n_near`), from near each on; the others' left empty.
    each = f"arrayMap((i, m) -> {c.kept(merged, near)}, _near_list, arraySlice(_masks, 1, _n_near))"
    every = f"if(_one, arrayMap(i -> {c.kept(whole, near)}, _near_list), {each})"
    return f"arrayResize({every}, length(_wl)) AS _b{c.name}"


def render(
    scan: SessionScan, source: CompiledSource, windows: Windows
) -> tuple[str, dict[str, Any]]:
    """The whole session scan over `windows`: one row of totals per window (`_w`).

    Returns the SQL and the parameters it adds to the scan's own and the
    windows' (`Context` binds those).
    """
    needs = scan.needs()
    terms = scan.terms(needs, near="")  # a piece keeps every kept event: windows choose
    ws, at, lb = "{bt_ws:Array(Int64)}", "{bt_at:Array(Int64)}", "{bt_lb:Array(Int64)}"
    n = len(windows)
    shards = source.on_shards()  # sessions whole on each shard: each judges its own
    part = (shards or source).select(
        f"session_id, roundDown(t, {{bt_bounds:Array(Int64)}}) AS _p,\n    {aggregates(terms)}",
        group="session_id, _p",
        dims=bool(needs.dims),
        terms=terms.items(),
    )
    gathered = ",\n        ".join(f"groupArray({name}) AS _g{name}" for name in NAMES)
    columns = ",\n      ".join(_by_window(c, ws) for c in COLUMNS)
    joined = ", ".join(["_wl AS _w", *(f"_b{name} AS {name}" for name in NAMES)])
    reads = f"arrayMap(p -> p >= {lb}[i] AND p < {at}[i], _ps)"
    last = f"arrayMax(arrayFilter((x, k) -> k, _glast_seen, {reads}))"
    per_session = f"""
  SELECT
    session_id, _w, {ws}[_w] AS _ws, {at}[_w] AS _at, {lb}[_w] AS _lb, {", ".join(NAMES)}
  FROM (
    SELECT
      session_id,
      _wl,
      {columns}
    FROM (
      SELECT
        *,
        arrayFilter(i -> arrayExists(p -> p >= {lb}[i] AND p < {at}[i], _ps),
                    range(1, {n + 1})) AS _touched,
        arrayFilter(i -> {last} >= {ws}[i] - {{near_ms:Int64}}, _touched) AS _near_list,
        arrayConcat(_near_list, arrayFilter(i -> NOT has(_near_list, i), _touched)) AS _wl,
        length(_near_list) AS _n_near,
        length(_ps) = 1 AS _one,
        if(_one, [], arrayMap(i -> {reads}, _wl)) AS _masks
      FROM (
        SELECT
          session_id,
          groupArray(_p) AS _ps,
          {gathered}
        FROM ({part}
        )
        GROUP BY session_id
      )
    )
  )
  ARRAY JOIN {joined}"""
    extra = {"bt_bounds": bounds(windows)}
    on = source.sharding if shards else None
    return scan.around(scan.finalize(per_session, needs), windowed=True, on=on), extra


def bounds(windows: Windows) -> list[int]:
    """Where pieces start: every window's lookback start and end, sorted, each once."""
    _, at, lb = windows.bounds()
    return sorted(set(at) | set(lb))
