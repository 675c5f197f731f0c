"""The session scan over many windows in one pass: the third rendering of its per-session level.

One check reads `[at - lookback, at)` and groups its events by session
(`SessionScan.render_raw`); many windows read the span of all their
lookbacks once, the events grouped by session and by *piece*, the pieces
being the intervals between consecutive window bounds (every window's
lookback start and end), so that each window's read range is a union of
whole pieces. Each session then gets one row per window whose read range
holds any of its events (`_w`), its per-session columns merged from those
pieces only: what `render_raw` computes over that window's events. The
levels above (the figures, then the totals, one row per window) are the
scan's own (`SessionScan.around`), the window's bounds those of each row.
It is cheap because every column is merged per window before the rows are
made (small arrays of the pieces' figures), and the role events (and the
other inputs holding events) are those `render_raw` keeps, from `near_ms`
before the window on: a window the session's last event comes before gets
none, and its row holds only numbers (most of a session's windows: they
read it for the lookback's counts and summaries only). The pass and what it
costs: docs/performance.md#backtest-one-pass-over-a-period.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checks.scans.session import (
    DATA_QUALITY,
    ROLES,
    FirstDim,
    Input,
    Scope,
    SessionScan,
    SetEvents,
    SetSummary,
    SideEvents,
    SideTimes,
    raw_input,
)
from checks.scans.windows import Windows
from checks.sources import CompiledSource

# The data-quality counts a window sums over its pieces; the others are made per window
# from other columns (duplicate role rows across pieces; a long session id).
SUMMED = ("latency_ignored", "payload_not_json_object", "invalid_utf8")
OWN: dict[str, tuple[str, str]] = {
    # Rows beyond the first of each role event id: each piece's own, plus the ids found
    # in more than one of the window's pieces, once per piece beyond the first. (For a
    # session of one piece, then for the pieces of mask `m`.)
    "duplicate_rows": (
        "_dups[1]",
        "arraySum(arrayFilter((d, k) -> k, _dups, m))"
        " + arraySum(arrayMap(c -> greatest(arrayCount(p -> has(c.2, p),"
        " arrayFilter((p, k) -> k, _ps, m)) - 1, 0), _cross))",
    ),
    "session_id_over_1kib": (
        DATA_QUALITY["session_id_over_1kib"],
        DATA_QUALITY["session_id_over_1kib"],
    ),
}
assert set(SUMMED) | set(OWN) == set(DATA_QUALITY), "every data-quality count has its rule"

Merge = Callable[[str], str]  # SQL over the window's pieces' values (`values`)
# Pieces keep every role event: each window keeps those from `near_ms` before it on.
LOWEST = "toInt64(-9223372036854775807)"


@dataclass(frozen=True)
class Piece:
    """A column of each piece of a session, and how a window's value is made from its pieces."""

    alias: str
    aggregate: str  # over the piece's events
    merge: Merge
    # It holds events (the element's time: `time` of `x`): only the windows the session may
    # have something due in get them, those from `near_ms` before the window on.
    time: Callable[[str], str] | None = None


def _of(function: str) -> Merge:
    return lambda values: f"{function}({values})"


def _itself(x: str) -> str:
    return x


def _first(x: str) -> str:
    return f"{x}.1"


def _summary(item: SetSummary) -> tuple[str, Merge]:
    """A set's first or last time over the pieces that hold one (0: none), or their count."""
    if item.what == "count":
        return raw_input(item), _of("arraySum")
    best = "arrayMin" if item.what == "first" else "arrayMax"
    counted = f"({raw_input(SetSummary(item.bit, 'count'))}, {raw_input(item)})"
    return (
        counted,
        lambda values: f"{best}(arrayMap(x -> x.2, arrayFilter(x -> x.1 > 0, {values})))",
    )


def _input_piece(alias: str, item: Input) -> Piece:
    if isinstance(item, SideTimes):
        return Piece(alias, raw_input(item), _of("arrayFlatten"), time=_itself)
    if isinstance(item, SideEvents | SetEvents):
        return Piece(alias, raw_input(item), _of("arrayFlatten"), time=_first)
    if isinstance(item, Scope):
        return Piece(alias, raw_input(item), _of("arrayMax"))
    if isinstance(item, SetSummary):
        return Piece(alias, *_summary(item))
    assert isinstance(item, FirstDim)
    # The dimension of the window's first event: that of its earliest piece.
    first = f"(min(t), {raw_input(item)})"
    return Piece(alias, first, lambda values: f"arrayMin({values}).2")


def _pieces(scan: SessionScan) -> list[Piece]:
    """The columns of a piece: the fixed ones, the summed data-quality counts, the inputs."""
    pieces = [
        Piece("scoped", "max(in_scope)", _of("arrayMax")),
        Piece("first_seen", "min(t)", _of("arrayMin")),
        Piece("last_seen", "max(t)", _of("arrayMax")),
        Piece("n_events", "count()", _of("arraySum")),
        Piece("_roles", ROLES, _of("arrayFlatten"), time=_first),
    ]
    pieces += [Piece(f"dq_{r}", DATA_QUALITY[r], _of("arraySum")) for r in SUMMED]
    pieces += [_input_piece(alias, item) for alias, item in scan.inputs.items()]
    return pieces


def render(
    scan: SessionScan, source: CompiledSource, windows: Windows
) -> tuple[str, dict[str, Any]]:
    """The whole session scan over `windows`: one row of totals per window (`_w`).

    Returns the SQL and the parameters it adds to the scan's own and the
    windows' (`Context` binds those).
    """
    pieces = _pieces(scan)
    per_piece = ",\n          ".join(
        [*scan.gathered(), *(f"{p.aggregate} AS {p.alias}" for p in pieces)]
    )
    gathered = ",\n        ".join(f"groupArray({p.alias}) AS _g{p.alias}" for p in pieces)
    ws, at, lb = "{bt_ws:Array(Int64)}", "{bt_at:Array(Int64)}", "{bt_lb:Array(Int64)}"
    n = len(windows)

    def in_range(i: str) -> str:
        """Per piece: whether window `i` reads it."""
        return f"arrayMap(p -> p >= {lb}[{i}] AND p < {at}[{i}], _ps)"

    def merged(p: Piece) -> str:
        values = f"arrayFilter((x, k) -> k, _g{p.alias}, m)"
        return p.merge(values)

    # Per window of `_wl` (the windows that read any piece: those the session may have
    # something due in, `_n_near`, first), each column's value; the columns holding events
    # only for those first windows, from `near_ms` before each on (as `render_raw` reads
    # them), the others' left empty (arrayResize). Most sessions lie in one piece, read
    # whole by every window that reads it: merged once.
    near = f"{ws}[i] - {{near_ms:Int64}}"
    by_window = []
    for p in pieces:
        whole = p.merge(f"_g{p.alias}")
        time = p.time
        if time is not None:

            def kept(values: str, time: Callable[[str], str] = time) -> str:
                return f"arrayFilter(x -> {time('x')} >= {near}, {values})"

            each = (
                f"arrayMap((i, m) -> {kept(merged(p))}, _near_list, arraySlice(_masks, 1, _n_near))"
            )
            every = f"if(_one, arrayMap(i -> {kept(whole)}, _near_list), {each})"
            by_window.append(f"arrayResize({every}, length(_wl)) AS _b{p.alias}")
        else:
            each = f"arrayMap(m -> {merged(p)}, _masks)"
            by_window.append(
                f"if(_one, arrayWithConstant(length(_wl), {whole}), {each}) AS _b{p.alias}"
            )
    by_window += [
        f"if(_one, arrayWithConstant(length(_wl), {whole}), arrayMap(m -> {each}, _masks))"
        f" AS _bdq_{r}"
        for r, (whole, each) in OWN.items()
    ]
    columns = ",\n      ".join(by_window)
    joined = ", ".join(
        ["_wl AS _w", *(f"_b{p.alias} AS {p.alias}" for p in pieces)]
        + [f"_bdq_{r} AS dq_{r}" for r in OWN]
    )
    # Only the joined columns go on: the per-window arrays would be copied into every row.
    carried = ", ".join([p.alias for p in pieces] + [f"dq_{r}" for r in OWN])
    last = "arrayMax(arrayFilter((x, k) -> k, _glast_seen, " + in_range("i") + "))"
    per_session = f"""
  SELECT
    session_id,
    _w,
    {ws}[_w] AS _ws,
    {at}[_w] AS _at,
    {lb}[_w] AS _lb,
    {carried}
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
        if(_one, [], arrayMap(i -> {in_range("i")}, _wl)) AS _masks
      FROM (
        SELECT
          session_id,
          groupArray(_p) AS _ps,
          {gathered},
          groupArray(arrayDistinct(arrayMap(x -> x.3, _roles))) AS _pids,
          arrayMap((r, ids) -> length(r) - length(ids), _g_roles, _pids) AS _dups,
          if(length(_ps) = 1, [], arraySort(arrayFlatten(_pids))) AS _sorted,
          -- Role event id hashes in more than one piece (rare: retries), with those pieces:
          -- each piece's distinct hashes, sorted together, equal neighbours.
          if(length(_ps) = 1, [], arrayMap(
            id -> (id, arrayFilter((p, ids) -> has(ids, id), _ps, _pids)),
            arrayDistinct(arrayFilter((id, previous) -> id = previous, _sorted,
                                      arrayPopBack(arrayPushFront(_sorted, _sorted[1] + 1)))))) AS _cross
        FROM (
          SELECT
            session_id,
            roundDown(t, {{bt_bounds:Array(Int64)}}) AS _p,
            {per_piece}
          FROM (
            {scan.masked(source, near=LOWEST)}
          )
          GROUP BY session_id, _p
        )
        GROUP BY session_id
      )
    )
  )
  ARRAY JOIN {joined}"""
    extra = {"bt_bounds": bounds(windows)}
    return scan.around(per_session, windowed=True), extra


def bounds(windows: Windows) -> list[int]:
    """Where pieces start: every window's lookback start and end, sorted, each once."""
    _, at, lb = windows.bounds()
    return sorted(set(at) | set(lb))
