"""Checks over the events of the window: quantile, streak, share, in one query.

Every quantile, streak and share check of one window length is judged by the
same scan: the window's events of any of their names, grouped by event id (so
each event counts once), then one aggregate per check over those groups.
Python gets one row back: per check, the counts, the value and at most 20
evidence items (a quantile's sorted sample stays in ClickHouse).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.base import CheckResult, Status, Window
from checks.breakdown import Triage, grouped
from checks.evidence import Evidence, FailureRun
from checks.kinds import CheckSpec, Quantile, Share, Streak
from checks.sessions import EVIDENCE
from checks.sources import CompiledSource
from checks.verdict import judge, percent
from watchdog.core.store import Store
from watchdog.core.text import plural
from watchdog.core.times import from_ms


def window_checks(specs: Sequence[CheckSpec]) -> list[CheckSpec]:
    """The checks this module evaluates."""
    return [s for s in specs if isinstance(s.params, Quantile | Streak | Share)]


def numeric_field(field: str, key_param: str) -> str:
    """SQL: a numeric normalized column, or `payload.<key>` read from the payload JSON.

    The key (`field` without `payload.`) is the bound parameter `key_param`.
    """
    if field.startswith("payload."):
        return f"toFloat64OrNull(JSONExtractRaw(payload, {{{key_param}:String}}))"
    return f"toFloat64OrNull(toString({field}))"


@dataclass
class _Query:
    """The SELECT items of the window query's three levels, and its parameters."""

    per_event: list[str] = field(default_factory=list)  # aggregates per event id
    totals: list[str] = field(default_factory=list)  # aggregates over the events
    shown: list[str] = field(default_factory=list)  # what Python reads back
    params: dict[str, Any] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    dims: Sequence[str] | None = None  # carry the triage of quantile and share checks
    triaged: dict[str, str] = field(default_factory=dict)  # tag -> its failing events' condition

    def carry_triage(self, tag: str, failing: str) -> None:
        """Count the failing events of a check, and by each dimension (`checks.triage` reads it).

        An event's dimensions are those of any of its rows (`any(dim_<name>)`).
        """
        if self.dims is None:
            return
        for d in self.dims:
            item = f"any(dim_{d}) AS edim_{d}"
            if item not in self.per_event:
                self.per_event.append(item)
            self.totals.append(f"sumMapIf(([edim_{d}], [toUInt64(1)]), {failing}) AS {tag}_by_{d}")
        self.totals.append(f"countIf({failing}) AS {tag}_items")
        self.shown += [f"{tag}_items", *(f"{tag}_by_{d}" for d in self.dims)]
        self.triaged[tag] = failing

    def member(self, tag: str, names: Sequence[str]) -> str:
        """Per event: whether it has a row named in `names`, and that row's time."""
        self.params[f"{tag}_names"] = list(names)
        self.names.update(names)
        named = f"name IN {{{tag}_names:Array(String)}}"
        self.per_event += [f"countIf({named}) > 0 AS {tag}_in", f"anyIf(t, {named}) AS {tag}_t"]
        return named

    def per_event_value(self, tag: str, named: str, expr: str) -> None:
        # `if` evaluates `expr` for this check's own events only (a JSON parse, often).
        self.per_event.append(f"anyIf(if({named}, {expr}, NULL), {named}) AS {tag}_v")

    def quantile(self, tag: str, spec: CheckSpec, p: Quantile) -> None:
        named = self.member(tag, p.events)
        self.per_event_value(tag, named, numeric_field(p.field, f"{tag}_key"))
        self.params.update(
            {
                f"{tag}_key": p.field.removeprefix("payload."),
                f"{tag}_num": p.q_num,
                f"{tag}_den": p.q_den,
                f"{tag}_target": float(spec.target),
            }
        )
        sample = f"{tag}_in AND {tag}_v IS NOT NULL AND isFinite({tag}_v)"
        above = f"{sample} AND {tag}_v >= {{{tag}_target:Float64}}"
        rank = (
            f"toUInt64(intDiv({tag}_n * {{{tag}_num:UInt64}} + {{{tag}_den:UInt64}} - 1,"
            f" {{{tag}_den:UInt64}}))"
        )
        self.totals += [
            f"countIf({sample}) AS {tag}_n",
            f"arraySort(groupArrayIf({tag}_v, {sample})) AS {tag}_xs",
            f"if({tag}_n = 0, NULL, {tag}_xs[{rank}]) AS {tag}_value",
            f"countIf({above}) AS {tag}_above",
            f"groupArraySortedIf({EVIDENCE})(({tag}_t, event_id), {above}) AS {tag}_slow",
        ]
        self.shown += [f"{tag}_{part}" for part in ("n", "value", "above", "slow")]
        # The triage's failing events: at or above target (as `checks.triage` words it).
        self.carry_triage(tag, f"{tag}_in AND {tag}_v >= {{{tag}_target:Float64}}")

    def streak(self, tag: str, p: Streak) -> None:
        named = self.member(tag, p.bad + p.good)
        self.params[f"{tag}_bad"] = list(p.bad)
        self.per_event.append(f"maxIf(name IN {{{tag}_bad:Array(String)}}, {named}) AS {tag}_bad")
        # The events in (ts, event_id) order, split before each good one: every chunk's
        # bad events are one run of consecutive failures.
        ordered = f"arraySort(groupArrayIf(({tag}_t, event_id, {tag}_bad), {tag}_in))"
        self.totals += [
            f"{ordered} AS {tag}_events",
            f"length({tag}_events) AS {tag}_n",
            f"arrayMap(c -> arrayFilter(x -> x.3 = 1, c), arraySplit(x -> x.3 = 0, {tag}_events))"
            f" AS {tag}_runs",
            f"arrayMax(arrayMap(r -> length(r), {tag}_runs)) AS {tag}_longest",
            f"arrayFirst(r -> length(r) = {tag}_longest, {tag}_runs) AS {tag}_first",
            f"if({tag}_longest > 0, ({tag}_first[1].1, {tag}_first[-1].1), (0, 0)) AS {tag}_earliest",
        ]
        self.shown += [f"{tag}_{part}" for part in ("n", "longest", "earliest")]

    def share(self, tag: str, p: Share) -> None:
        named = self.member(tag, p.events)
        self.params[f"{tag}_field"] = p.field
        self.params[f"{tag}_value"] = p.value
        self.per_event_value(tag, named, f"JSONExtractString(payload, {{{tag}_field:String}})")
        hit = f"{tag}_in AND {tag}_v = {{{tag}_value:String}}"
        self.totals += [
            f"countIf({tag}_in) AS {tag}_n",
            f"countIf({hit}) AS {tag}_hits",
            f"groupArraySortedIf({EVIDENCE})(({tag}_t, event_id), {hit}) AS {tag}_matching",
        ]
        self.shown += [f"{tag}_{part}" for part in ("n", "hits", "matching")]
        self.carry_triage(tag, hit)

    def sql(self, source: CompiledSource) -> str:
        per_event = ",\n      ".join(self.per_event)
        totals = ",\n    ".join(self.totals)
        return f"""
SELECT {", ".join(self.shown)} FROM (
  SELECT
    {totals}
  FROM (
    SELECT
      event_id,
      {per_event}
    FROM (SELECT * FROM {source.events()}
          WHERE name IN {{window_names:Array(String)}} AND t >= {{ws_ms:Int64}})
    GROUP BY event_id
  )
)"""


@dataclass(frozen=True)
class WindowFindings:
    results: dict[str, CheckResult]
    triage: dict[str, Triage] = field(default_factory=dict)  # breached quantile, share checks


def evaluate(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    dims: Sequence[str] | None = None,
) -> WindowFindings:
    """Run the window query once and judge every quantile, streak and share check in it.

    With `dims` (the source's dimensions but free text), the query carries the
    triage breakdown of every breached quantile and share check.
    """
    q = _Query(dims=dims)
    for i, spec in enumerate(specs):
        p = spec.params
        if isinstance(p, Quantile):
            q.quantile(f"w{i}", spec, p)
        elif isinstance(p, Streak):
            q.streak(f"w{i}", p)
        elif isinstance(p, Share):
            q.share(f"w{i}", p)
    params = {**source.params, **window.params(), **q.params, "window_names": sorted(q.names)}
    row = store.aggregate(q.sql(source if dims is None else source.with_dims()), params)
    results: dict[str, CheckResult] = {}
    for i, spec in enumerate(specs):
        p, tag = spec.params, f"w{i}"
        if isinstance(p, Quantile):
            results[spec.id] = _quantile(spec, p, row, tag)
        elif isinstance(p, Streak):
            results[spec.id] = _streak(spec, row, tag)
        elif isinstance(p, Share):
            results[spec.id] = _share(spec, p, row, tag)
    triage = {
        spec.id: grouped(
            int(row[f"w{i}_items"]), {d: row[f"w{i}_by_{d}"] for d in dims or ()}, dims or ()
        )
        for i, spec in enumerate(specs)
        if f"w{i}" in q.triaged and results[spec.id].status is Status.BREACHED
    }
    return WindowFindings(results, triage)


def _quantile(spec: CheckSpec, p: Quantile, row: dict[str, Any], tag: str) -> CheckResult:
    """Exact nearest-rank quantile: the value at rank ceil(q * n) of the sorted sample."""
    n = int(row[f"{tag}_n"])
    value = float(row[f"{tag}_value"]) if row[f"{tag}_value"] is not None else None
    label = f"p{p.q_num * 100 // p.q_den}" if 100 % p.q_den == 0 else f"q{p.q_num}/{p.q_den}"
    what = "latency" if p.field == "latency_ms" else p.field
    shown = f"{value or 0:.0f} ms" if spec.unit == "ms" else f"{value or 0:g}"
    summary = f"{label} {what} {shown} over {n} {p.noun}"
    evidence = Evidence(
        events=tuple(eid for _, eid in row[f"{tag}_slow"]),
        at_or_above_target=int(row[f"{tag}_above"]),
    )
    return judge(
        spec,
        value,
        n,
        summary,
        evidence,
        no_data=n == 0,
        no_data_summary=f"no {', '.join(p.events)} with a {p.field} in the window",
    )


def _streak(spec: CheckSpec, row: dict[str, Any], tag: str) -> CheckResult:
    """Longest run of consecutive bad events, ordered by (ts, event_id), and its earliest place."""
    n = int(row[f"{tag}_n"] or 0)
    longest = int(row[f"{tag}_longest"] or 0)
    evidence = Evidence()
    if longest > 0:
        start, end = row[f"{tag}_earliest"]
        evidence = Evidence(run=FailureRun(from_ms(start), from_ms(end), longest))
    summary = (
        f"longest run of {plural(longest, 'consecutive failure')} among {plural(n, 'outcome')}"
    )
    return judge(
        spec,
        float(longest),
        n,
        summary,
        evidence,
        no_data=n == 0,
        no_data_summary="no completed or failed outcome in the window",
    )


def _share(spec: CheckSpec, p: Share, row: dict[str, Any], tag: str) -> CheckResult:
    """Share of the window's events whose payload field equals the value."""
    n, hits = int(row[f"{tag}_n"]), int(row[f"{tag}_hits"])
    value = hits / n if n else None
    summary = f"{percent(value or 0)} of {n} {p.noun} had {p.field} {p.value} ({hits})"
    return judge(
        spec,
        value,
        n,
        summary,
        Evidence(events=tuple(eid for _, eid in row[f"{tag}_matching"]), matching=hits),
        no_data=n == 0,
        no_data_summary=f"no {', '.join(p.events)} in the window",
    )
