"""Checks over the events of the window: quantile, streak, share.

Each reads only the named events with ts in W, counts every event id once,
and returns one aggregate row.
"""

from __future__ import annotations

from typing import Any

from checks.base import CheckResult, Window, from_ms, rfc3339
from checks.kinds import CheckSpec, Quantile, Share, Streak
from checks.sessions import EVIDENCE
from checks.sources import CompiledSource
from checks.verdict import judge, percent
from watchdog.store import Store


def _window_events(source: CompiledSource, columns: str) -> str:
    """The named events of W, one row per event id."""
    return (
        f"SELECT event_id, {columns} FROM (SELECT * FROM {source.events()}"
        " WHERE name IN {names:Array(String)} AND t >= {ws_ms:Int64})"
        " GROUP BY event_id"
    )


def _params(source: CompiledSource, window: Window, **extra: Any) -> dict[str, Any]:
    return {**source.params, **window.params(), **extra}


def _field(field: str) -> str:
    """A numeric normalized column, or `payload.<key>` read from the payload JSON."""
    if field.startswith("payload."):
        return "toFloat64OrNull(JSONExtractRaw(payload, {field_key:String}))"
    return f"toFloat64OrNull(toString({field}))"


def quantile(
    store: Store, source: CompiledSource, window: Window, spec: CheckSpec, p: Quantile
) -> CheckResult:
    """Exact nearest-rank quantile: the value at rank ceil(q * n) of the sorted sample."""
    inner = _window_events(source, f"any(t) AS t, any({_field(p.field)}) AS x")
    # The sorted sample stays in ClickHouse: Python gets the value, not every latency.
    sql = f"""
SELECT n, value, at_or_above, slow FROM (
SELECT
  count() AS n,
  arraySort(groupArray(x)) AS xs,
  if(n = 0, NULL, xs[toUInt64(intDiv(n * {{q_num:UInt64}} + {{q_den:UInt64}} - 1, {{q_den:UInt64}}))])
    AS value,
  countIf(x >= {{target:Float64}}) AS at_or_above,
  groupArraySortedIf({EVIDENCE})((t, event_id), x >= {{target:Float64}}) AS slow
FROM ({inner}) WHERE x IS NOT NULL AND isFinite(x)
)
"""
    row = store.aggregate(
        sql,
        _params(
            source,
            window,
            names=list(p.events),
            q_num=p.q_num,
            q_den=p.q_den,
            target=float(spec.target),
            field_key=p.field.removeprefix("payload."),
        ),
    )
    n = int(row["n"])
    value = float(row["value"]) if row["value"] is not None else None
    label = f"p{p.q_num * 100 // p.q_den}" if 100 % p.q_den == 0 else f"q{p.q_num}/{p.q_den}"
    what = "latency" if p.field == "latency_ms" else p.field
    shown = f"{value or 0:.0f} ms" if spec.unit == "ms" else f"{value or 0:g}"
    summary = f"{label} {what} {shown} over {n} {p.noun}"
    evidence = {
        "events": [eid for _, eid in row["slow"]],
        "at_or_above_target": int(row["at_or_above"]),
    }
    return judge(
        spec,
        value,
        n,
        summary,
        evidence,
        no_data=n == 0,
        no_data_summary=f"no {', '.join(p.events)} with a {p.field} in the window",
    )


def streak(
    store: Store, source: CompiledSource, window: Window, spec: CheckSpec, p: Streak
) -> CheckResult:
    """Longest run of consecutive bad events, ordered by (ts, event_id), and its earliest place."""
    inner = _window_events(source, "any(t) AS t, max(name IN {bad:Array(String)}) AS bad")
    # Every good event starts a new group; the bad events of a group form one run.
    sql = f"""
SELECT
  sum(events) AS n,
  max(run) AS longest,
  argMinIf((start_t, end_t), (-run, start_t), run > 0) AS earliest
FROM (
  SELECT grp, count() AS events, countIf(bad) AS run, minIf(t, bad) AS start_t, maxIf(t, bad) AS end_t
  FROM (
    SELECT t, bad, sum(1 - bad) OVER (ORDER BY t, event_id ROWS UNBOUNDED PRECEDING) AS grp
    FROM ({inner})
  )
  GROUP BY grp
)
"""
    names = list(p.bad + p.good)
    row = store.aggregate(sql, _params(source, window, names=names, bad=list(p.bad)))
    n = int(row["n"] or 0)
    longest = int(row["longest"] or 0)
    evidence: dict[str, Any] = {}
    if longest > 0:
        start, end = row["earliest"]
        evidence = {
            "start": rfc3339(from_ms(start)),
            "end": rfc3339(from_ms(end)),
            "length": longest,
        }
    summary = f"longest run of {longest} consecutive failures among {n} outcomes"
    return judge(
        spec,
        float(longest),
        n,
        summary,
        evidence,
        no_data=n == 0,
        no_data_summary="no completed or failed outcome in the window",
    )


def share(
    store: Store, source: CompiledSource, window: Window, spec: CheckSpec, p: Share
) -> CheckResult:
    """Share of the window's events whose payload field equals the value."""
    inner = _window_events(
        source, "any(t) AS t, any(JSONExtractString(payload, {share_field:String})) AS v"
    )
    sql = f"""
SELECT
  count() AS n,
  countIf(v = {{share_value:String}}) AS hits,
  groupArraySortedIf({EVIDENCE})((t, event_id), v = {{share_value:String}}) AS matching
FROM ({inner})
"""
    row = store.aggregate(
        sql,
        _params(source, window, names=list(p.events), share_field=p.field, share_value=p.value),
    )
    n, hits = int(row["n"]), int(row["hits"])
    value = hits / n if n else None
    summary = f"{percent(value or 0)} of {n} {p.noun} had {p.field} {p.value} ({hits})"
    return judge(
        spec,
        value,
        n,
        summary,
        {"events": [eid for _, eid in row["matching"]], "matching": hits},
        no_data=n == 0,
        no_data_summary=f"no {', '.join(p.events)} in the window",
    )
