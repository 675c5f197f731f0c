"""Outcome rate: (failed + lost) / (completed + failed + lost) of an operation in W.

observe_failure_rate, recall_failure_rate and `kind = "outcome_rate"` custom
checks (docs/checks.md#your-own-checks). Judged in the session scan: completed
and failed are every event of W (with or without a session), lost the outcome
obligations (a started event with no completed or failed of its session within
the grace) due in W. The triage groups the failed events and the lost ones,
which the same obligation rule finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from pydantic import Field

from checks.base import CheckResult, CheckSpec, Comparison, KindParams, Status, Unit
from checks.breakdown import Triage
from checks.evidence import Evidence
from checks.kinds.base import Declared, Described, Flag, duration
from checks.kinds.obligations import Anchor, Obligation, judge
from checks.scans.binder import Binder, merged
from checks.scans.plans import Context, Judged, Plans, Reader, Row, session_sql
from checks.scans.session import EVIDENCE, SessionScan
from checks.triage import FREE_TEXT, events_in_window, group, items
from checks.verdict import judge as verdict
from checks.verdict import percent
from watchdog.core.durations import Duration, duration_ms
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.slo import RATIO
from watchdog.core.sql import quoted

# The error class of a lost operation: it has no error text of its own.
LOST_CLASS = "(lost: no outcome within the grace period)"
# The most lost events whose id hashes the triage binds as a parameter; beyond, it finds them
# again with the session scan's rule (a query's parameters travel in its URL to a server).
LOST_BOUND = 20_000
# The lost events the scan carried: their id hashes, read only where they can lie (a start lost
# in W has its deadline, ts + grace, in W), so the read prunes by time (docs/performance.md).
CARRIED = (
    "t >= {ws_ms:Int64} - {tr_grace:Int64} AND t < {at_ms:Int64}"
    " AND cityHash64(event_id) IN {tr_lost:Array(UInt64)}"
)


@dataclass(frozen=True)
class OutcomeRate(KindParams):
    """(failed + lost) / (completed + failed + lost) in W."""

    started: tuple[str, ...]
    completed: tuple[str, ...]
    failed: tuple[str, ...]
    grace_ms: int
    noun: str = "operations"

    @property
    def loss(self) -> Obligation:
        """The outcome obligation of each started event (lost when unmet)."""
        return Obligation(
            anchor=Anchor.EVENT,
            required=self.completed + self.failed,
            grace_ms=self.grace_ms,
            triggers=self.started,
            label=f"{self.noun.removesuffix('s')} outcome",
        )


Names = tuple[str, ...]


class OutcomeRateConfig(CustomCheck):
    """(failed + lost) / (completed + failed + lost) of an operation."""

    kind: Literal["outcome_rate"]
    started: Names = Field(min_length=1)
    completed: Names = Field(min_length=1)
    failed: Names = Field(min_length=1)
    grace: Duration
    comparison: Comparison = Comparison.GE
    min_samples: int = Field(default=20, ge=0)

    def reach(self, default_window: timedelta) -> timedelta:
        return super().reach(default_window) + self.grace

    @property
    def unit(self) -> Unit:
        """A rate: a target is a fraction (`0.05`) or a percentage (`5%`)."""
        return Unit.RATIO


def _breakdown(
    p: OutcomeRate, lost: str, params: Mapping[str, Any], ctx: Context, dims: Sequence[str]
) -> Triage:
    """The failed events of W and the lost ones (the started events meeting `lost`, SQL with
    `params`), by outcome and dimension."""
    events = ctx.source.events_source  # beside a session state: the narrow table
    failed = events_in_window(events, dims, "name IN {tr_failed:Array(String)}", outcome="failed")
    lost_items = items(
        events,
        dims,
        f"name IN {{tr_started:Array(String)}} AND {lost}",
        "lost",
        shown={d: quoted(LOST_CLASS) for d in dims if d in FREE_TEXT},
    )
    bound = merged(params, {"tr_failed": list(p.failed), "tr_started": list(p.started)})
    return group(ctx, f"{failed}\nUNION ALL\n{lost_items}", ["outcome", *dims], bound)


def _lost(scan: SessionScan, p: OutcomeRate) -> str:
    """Per session: its started events (EVENT) lost in W (real sessions only)."""
    misses = judge(scan, f"{scan.tag()}_loss", p.loss).misses
    assert misses is not None
    return scan.per_session(f"{misses}_real", f"if(real, {misses}, [])")


class OutcomeRateKind(Declared[OutcomeRate, OutcomeRateConfig]):
    name = "outcome_rate"
    params = OutcomeRate
    config = OutcomeRateConfig
    sli = RATIO

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.session(spec)
        tag = scan.tag()
        lost = _lost(scan, p)
        completed = scan.total(f"{tag}_completed", f"sum({scan.count_in_window(p.completed)})")
        failed = scan.total(f"{tag}_failed", f"sum({scan.count_in_window(p.failed)})")
        lost_n = scan.total(f"{tag}_lost", f"sum(length({lost}))")
        lost_ids = scan.evidence_total(
            f"{tag}_lost_ids", f"groupArraySortedArray({EVIDENCE})({lost})"
        )
        failed_ids = scan.evidence_total(
            f"{tag}_failed_ids",
            f"groupArraySortedArray({EVIDENCE})({scan.oldest_in_window(p.failed)})",
        )
        # With the triage carried, the scan finds the lost events for it (their id hashes).
        lost_hashes = None
        if scan.dims is not None:
            lost_hashes = scan.total(
                f"{tag}_lost_hashes", f"groupArrayArray(arrayMap(c -> c.hash, {lost}))"
            )

        def read(row: Row, ctx: Context) -> Judged:
            n_completed, n_failed, n_lost = (int(row[a]) for a in (completed, failed, lost_n))
            denominator = n_completed + n_failed + n_lost
            value = (n_failed + n_lost) / denominator if denominator else None
            # By time, then the id's hash, as the scan chose them.
            listed = [*row[lost_ids], *row[failed_ids]]
            ids = sorted(listed, key=lambda e: (e["t"], e["hash"]))[:EVIDENCE]
            evidence = Evidence(
                completed=n_completed,
                failed=n_failed,
                lost=n_lost,
                events=tuple(str(e["id"]) for e in ids),
            )
            summary = (
                f"{percent(value or 0)} of {denominator} {p.noun} failed or were lost"
                f" ({n_failed} failed, {n_lost} lost)"
            )
            result = verdict(
                spec,
                value,
                denominator,
                summary,
                evidence,
                no_data=denominator == 0,
                no_data_summary=f"no {p.noun} completed, failed or were due in the window",
            )
            found = None
            if lost_hashes is not None and len(row[lost_hashes]) <= LOST_BOUND:
                hashes = sorted({int(h) for h in row[lost_hashes]})
                found = partial(_breakdown, p, CARRIED, {"tr_lost": hashes, "tr_grace": p.grace_ms})
            return Judged(result, breakdown=found if result.status is Status.BREACHED else None)

        return read

    def triage(
        self, ctx: Context, dims: Sequence[str], spec: CheckSpec, result: CheckResult
    ) -> Triage:
        """The failed events of W and the lost ones, by outcome and dimension.

        Lost: the started events whose outcome obligation is due in W and
        unmet, found by the session scan's own rule; their free-text
        dimensions read as the lost class.
        """
        p = self.of(spec)
        scan = SessionScan()
        lost = _lost(scan, p)
        scan.total("lost", f"groupArrayArray(arrayMap(c -> c.hash, {lost}))")  # id hashes
        lost_sql, lost_params = session_sql(ctx, scan)
        condition = f"cityHash64(event_id) IN (SELECT arrayJoin(lost) FROM ({lost_sql}))"
        return _breakdown(p, condition, lost_params, ctx, dims)

    def slo_counts(self, result: CheckResult) -> tuple[int, int]:
        """Good: the completed outcomes; bad: the failed and the lost ones (none under no_data)."""
        evidence = result.evidence
        return evidence.completed or 0, (evidence.failed or 0) + (evidence.lost or 0)

    def slo_lead(self, params: OutcomeRate) -> timedelta:
        """The grace: a started event lost in a bucket has its ts that long before the deadline,
        and its outcomes lie between the two; completed and failed count in the bucket of ts."""
        return timedelta(milliseconds=params.grace_ms)

    def obligations(self, params: OutcomeRate) -> Sequence[Obligation]:
        return (params.loss,)

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        return Flag(self.of(spec).failed, "1", "'failed'")

    def describe(self, params: OutcomeRate) -> Described:
        return [("lost after", f"{duration(params.grace_ms)} without an outcome")]

    def from_config(self, config: OutcomeRateConfig) -> tuple[OutcomeRate, Unit]:
        params = OutcomeRate(
            started=config.started,
            completed=config.completed,
            failed=config.failed,
            grace_ms=duration_ms(config.grace),
        )
        return params, config.unit


KIND = OutcomeRateKind()
