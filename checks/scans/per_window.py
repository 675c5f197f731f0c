"""The session scan over many windows in one pass: the third rendering of its per-session level.

One check reads `[at - lookback, at)` and groups its events by session
(`SessionScan.render_raw`). Many windows read the span of all their
lookbacks once: the events are grouped by session and by *piece*, the
pieces being the intervals between consecutive window bounds (every
window's lookback start and end), so that each window's read range is a
union of whole pieces. Each session then gets one row per window whose
read range holds any of its events, its per-session columns merged from
those pieces only: the first and last time, the event count, the scope,
the role events and the other inputs of `[lb, at)` of that window, what
`render_raw` computes over that window's events. The levels above (the
figures, then the totals, one row per window) are the scan's own
(`SessionScan.around`), the window's bounds those of each row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checks.scans.session import (
    DATA_QUALITY,
    LOOKBACK_ROLES,
    ROLES,
    FirstDim,
    Input,
    Scope,
    SessionScan,
    SideEvents,
    SideTimes,
    raw_input,
)
from checks.scans.windows import Windows
from checks.sources import CompiledSource

# How each data-quality count of a window is made from its pieces: summed, or (None)
# computed over the window's merged columns by its own expression (the duplicate role
# events over the merged role events; a long session id over the session id).
SUMMED: dict[str, bool] = {
    "duplicate_rows": False,
    "latency_ignored": True,
    "payload_not_json_object": True,
    "invalid_utf8": True,
    "session_id_over_1kib": False,
}
assert SUMMED.keys() == DATA_QUALITY.keys(), "every data-quality count is merged by a rule"


@dataclass(frozen=True)
class Piece:
    """One column of a session's piece, and how a window merges it from its pieces (`_in`)."""

    alias: str
    aggregate: str  # over the piece's events
    merge: Callable[[str], str]  # SQL over the window's pieces' values (an array)


def _largest(values: str) -> str:
    return f"arrayMax({values})"


def _smallest(values: str) -> str:
    return f"arrayMin({values})"


def _sum(values: str) -> str:
    return f"arraySum({values})"


def _joined(values: str) -> str:
    return f"arrayFlatten({values})"


def _pieces(scan: SessionScan) -> list[Piece]:
    """The columns of a piece: the fixed ones, the summed data-quality counts, the inputs."""
    pieces = [
        Piece("scoped", "max(in_scope)", _largest),
        Piece("first_seen", "min(t)", _smallest),
        Piece("last_seen", "max(t)", _largest),
        Piece("n_events", "count()", _sum),
        Piece("_roles", ROLES, _joined),
    ]
    pieces += [
        Piece(f"dq_{reason}", DATA_QUALITY[reason], _sum)
        for reason, summed in SUMMED.items()
        if summed
    ]
    for alias, item in scan.inputs.items():
        pieces.append(Piece(alias, raw_input(item), _merge_of(item)))
    return pieces


def _merge_of(item: Input) -> Callable[[str], str]:
    if isinstance(item, SideTimes | SideEvents):
        return _joined
    if isinstance(item, Scope):
        return _largest
    assert isinstance(item, FirstDim)
    return _smallest  # over (the piece's first time, its first event's dimension)


def render(
    scan: SessionScan, source: CompiledSource, windows: Windows
) -> tuple[str, dict[str, Any]]:
    """The whole session scan over `windows`: one row of totals per window (`_w`).

    Returns the SQL and the parameters it adds to the scan's own and the
    windows' (`Context` binds those).
    """
    pieces = _pieces(scan)
    position = {p.alias: i + 2 for i, p in enumerate(pieces)}  # in the piece tuple; 1: its start
    per_piece = ",\n        ".join(f"{p.aggregate} AS {p.alias}" for p in pieces)
    fields = ", ".join(["_p", *(p.alias for p in pieces)])
    merged = []
    for p in pieces:
        k = position[p.alias]
        if isinstance(scan.inputs.get(p.alias), FirstDim):
            # The dimension of the window's first event: that of its earliest piece.
            first = position["first_seen"]
            merged.append(
                f"tupleElement(arrayMin(arrayMap(x -> (x.{first}, x.{k}), _in)), 2) AS {p.alias}"
            )
        else:
            merged.append(f"{p.merge(f'arrayMap(x -> x.{k}, _in)')} AS {p.alias}")
    merged += [
        f"{DATA_QUALITY[reason]} AS dq_{reason}" for reason, summed in SUMMED.items() if not summed
    ]
    columns = ",\n      ".join(merged)
    n = len(windows)
    # The windows whose read range holds any of the session's pieces.
    touched = (
        f"arrayFilter(i -> arrayExists(x -> x.1 >= {{bt_lb:Array(Int64)}}[i]"
        f" AND x.1 < {{bt_at:Array(Int64)}}[i], _pieces), range(1, {n + 1}))"
    )
    # A session whose last event lies more than the scan's reach before a window's start
    # has nothing due and nothing in that window: its figures get no role event there
    # (`SessionScan`), only the lookback's totals count it.
    pruned = ", ".join(
        f"if(last_seen + {{bt_reach:Int64}} >= _ws, {alias}, []) AS {alias}"
        for alias in ("_roles", *(a for a, i in scan.inputs.items() if _is_events(i)))
    )
    per_session = f"""
  SELECT * REPLACE ({pruned})
  FROM (
    SELECT
      session_id,
      _w,
      {{bt_ws:Array(Int64)}}[_w] AS _ws,
      {{bt_at:Array(Int64)}}[_w] AS _at,
      {{bt_lb:Array(Int64)}}[_w] AS _lb,
      arrayFilter(x -> x.1 >= _lb AND x.1 < _at, _pieces) AS _in,
      {columns},
      _roles AS {LOOKBACK_ROLES}
    FROM (
      SELECT session_id, groupArray(tuple({fields})) AS _pieces
      FROM (
        SELECT
          session_id,
          roundDown(t, {{bt_bounds:Array(Int64)}}) AS _p,
          {per_piece}
        FROM (
          {scan.masked(source)}
        )
        GROUP BY session_id, _p
      )
      GROUP BY session_id
    )
    ARRAY JOIN {touched} AS _w
  )"""
    extra = {"bt_bounds": bounds(windows), "bt_reach": scan.reach_ms}
    return scan.around(per_session, windowed=True), extra


def _is_events(item: Input) -> bool:
    """Whether an input holds some of the session's events (pruned as the role events are)."""
    return isinstance(item, SideTimes | SideEvents)


def bounds(windows: Windows) -> list[int]:
    """Where pieces start: every window's lookback start and end, sorted, each once."""
    _, at, lb = windows.bounds()
    return sorted(set(at) | set(lb))
