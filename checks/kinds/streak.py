"""Streak: the longest run of consecutive failed outcomes in W (the circuit breaker).

circuit_breaker and `kind = "streak"` custom checks
(docs/checks.md#your-own-checks). Judged in the window scan: the bad and good
events of W in (ts, event id) order, split before each good one; each chunk's
bad events are one run. The triage groups the events of the earliest longest
run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from checks.base import CheckResult, CheckSpec, KindParams, Unit
from checks.breakdown import Triage
from checks.evidence import Evidence, FailureRun
from checks.kinds.base import Declared, Described, Flag
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.triage import events_in_window, group
from checks.verdict import judge
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.text import plural
from watchdog.core.times import from_ms, to_ms


@dataclass(frozen=True)
class Streak(KindParams):
    """Longest run of consecutive `bad` events among `bad + good` in W, by (ts, event_id)."""

    bad: tuple[str, ...]
    good: tuple[str, ...]


class StreakConfig(CustomCheck):
    """Longest run of consecutive `bad` events among `bad + good`."""

    kind: Literal["streak"]
    bad: tuple[str, ...] = Field(min_length=1)
    good: tuple[str, ...] = Field(min_length=1)


# An outcome event in (ts, event_id) order, and whether it is a bad one.
_OUTCOME = "Tuple(t Int64, id String, bad Bool)"


class StreakKind(Declared[Streak, StreakConfig]):
    name = "streak"
    params = Streak
    config = StreakConfig

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.window(spec)
        tag = scan.tag()
        named = scan.member(tag, p.bad + p.good)
        bad = scan.bind.names(p.bad)
        scan.per_event_item(f"maxIf(name IN {bad}, {named}) AS {tag}_bad")
        # The events in (ts, event_id) order, split before each good one: every chunk's
        # bad events are one run of consecutive failures.
        ordered = (
            f"arraySort(groupArrayIf(CAST(({tag}_t, event_id, {tag}_bad) AS {_OUTCOME}), {tag}_in))"
        )
        runs = f"arraySplit(x -> NOT x.bad, {tag}_events)"
        h = scan.add_totals(
            tag,
            {
                "events": ordered,
                "n": f"length({tag}_events)",
                "runs": f"arrayMap(c -> arrayFilter(x -> x.bad, c), {runs})",
                "longest": f"arrayMax(arrayMap(r -> length(r), {tag}_runs))",
                "first": f"arrayFirst(r -> length(r) = {tag}_longest, {tag}_runs)",
                "earliest": f"CAST(if({tag}_longest > 0, ({tag}_first[1].t, {tag}_first[-1].t),"
                f" (0, 0)) AS Tuple(start Int64, end Int64))",
            },
            shown=("n", "longest", "earliest"),
        )

        def read(row: Row, ctx: Context) -> Judged:
            """The longest run of consecutive bad events, and its earliest place."""
            n = int(row[h["n"]] or 0)
            longest = int(row[h["longest"]] or 0)
            evidence = Evidence()
            if longest > 0:
                run = row[h["earliest"]]
                evidence = Evidence(
                    run=FailureRun(from_ms(run["start"]), from_ms(run["end"]), longest)
                )
            summary = (
                f"longest run of {plural(longest, 'consecutive failure')}"
                f" among {plural(n, 'outcome')}"
            )
            return Judged(
                judge(
                    spec,
                    float(longest),
                    n,
                    summary,
                    evidence,
                    no_data=n == 0,
                    no_data_summary="no completed or failed outcome in the window",
                )
            )

        return read

    def triage(
        self, ctx: Context, dims: Sequence[str], spec: CheckSpec, result: CheckResult
    ) -> Triage | None:
        """The bad events of the earliest longest run, by dimension."""
        run = result.evidence.run
        if run is None:
            return None
        p = self.of(spec)
        params = {"tr_bad": list(p.bad), "tr_from": to_ms(run.start), "tr_to": to_ms(run.end)}
        condition = "name IN {tr_bad:Array(String)} AND t >= {tr_from:Int64} AND t <= {tr_to:Int64}"
        events = ctx.source.events_source
        return group(ctx, events_in_window(events, dims, condition), dims, params)

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        return Flag(self.of(spec).bad, "1", "'a failure: runs of consecutive ones count'")

    def describe(self, params: Streak) -> Described:
        return [("failures", ", ".join(params.bad))]

    def from_config(self, config: StreakConfig) -> tuple[Streak, Unit]:
        return Streak(bad=config.bad, good=config.good), config.unit


KIND = StreakKind()
