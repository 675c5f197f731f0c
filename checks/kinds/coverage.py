"""Coverage: sessions (or trigger events) with an obligation due in W and unmet.

recall_coverage, observe_coverage, recall_injection, recall_before_response
and `kind = "coverage"` custom checks (docs/checks.md#your-own-checks). Judged
in the session scan; with triage dimensions, the failing sessions ride along:
counted by each dimension of their first event, and the oldest 20 with what
each missed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from checks.base import CheckSpec, KindParams, Status, Unit
from checks.breakdown import FailingSession, Triage, grouped
from checks.evidence import Evidence
from checks.kinds.base import Declared, Described
from checks.kinds.obligations import Anchor, Judging, Obligation, judge
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE, SessionScan
from checks.verdict import judge as verdict
from watchdog.core.durations import Duration, duration_ms
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.times import from_ms


class Counted(StrEnum):
    """What a coverage check counts: the sessions that missed, or the trigger events."""

    SESSIONS = "sessions"
    EVENTS = "events"


@dataclass(frozen=True)
class Coverage(KindParams):
    """Sessions with an obligation due in W and unmet."""

    obligations: tuple[Obligation, ...]
    # no_data also when none of these events exists within lookback (a source
    # that never emits them cannot be judged).
    requires_seen: tuple[str, ...] = ()
    noun: str = "sessions"
    breach_phrase: str = "missed an obligation"
    session_filter: str | None = None  # SQL: only sessions with a matching event are judged
    # EVENTS: value, sample and evidence are the trigger events (every obligation is
    # Anchor.EVENT), not the sessions.
    counted: Counted = Counted.SESSIONS

    def __post_init__(self) -> None:
        if self.counted is Counted.EVENTS and any(
            ob.anchor is not Anchor.EVENT for ob in self.obligations
        ):
            raise ValueError("a coverage check counting events needs trigger events")


Names = tuple[str, ...]


class CoverageConfig(CustomCheck):
    """Every session emits one of `required` within `grace` of its start (or of each trigger).

    With `until`, each trigger's deadline is the first `until` event after it
    when that comes before `grace`: "`required` before `until`, after each
    `trigger`". `count = "events"` counts the triggers instead of the sessions.
    """

    kind: Literal["coverage"]
    required: Names = Field(min_length=1)
    grace: Duration
    trigger: Names = ()
    until: Names = ()
    lead: Duration = timedelta(0)
    session_filter: str | None = None
    count: Literal["sessions", "events"] = "sessions"

    @model_validator(mode="after")
    def _needs_trigger(self) -> CoverageConfig:
        if not self.trigger:
            if self.until:
                raise ValueError("until needs trigger (the events after which it applies)")
            if self.count == "events":
                raise ValueError('count = "events" needs trigger (the events it counts)')
        return self

    def reach(self, default_window: timedelta) -> timedelta:
        return super().reach(default_window) + self.grace


class CoverageKind(Declared[Coverage, CoverageConfig]):
    name = "coverage"
    params = Coverage
    config = CoverageConfig

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.session(spec)
        tag = scan.tag()
        judged = [judge(scan, f"{tag}_{j}", ob) for j, ob in enumerate(p.obligations)]
        real = self.judges(scan, spec)
        dues = " + ".join(j.due for j in judged)
        unmets = " + ".join(j.unmet for j in judged)
        if p.counted is Counted.EVENTS:  # the trigger events: due in W, unmet, the oldest unmet
            missed = ", ".join(j.misses or "[]" for j in judged)
            sample = scan.total(f"{tag}_sample", f"sumIf({dues}, {real})")
            value = scan.total(f"{tag}_value", f"sumIf({unmets}, {real})")
            evidence = scan.evidence_total(
                f"{tag}_evidence",
                f"groupArraySortedArray({EVIDENCE})(if({real}, arrayConcat({missed}), []))",
            )
        else:
            failed = f"{real} AND ({unmets}) > 0"
            sample = scan.total(f"{tag}_sample", f"countIf({real} AND ({dues}) > 0)")
            value = scan.total(f"{tag}_value", f"countIf({failed})")
            evidence = scan.total(
                f"{tag}_evidence",
                f"groupArraySortedIf({EVIDENCE})(CAST((first_seen, session_id) AS {_SESSION}),"
                f" {failed})",
            )
        seen = None
        if p.requires_seen:
            count, _ = scan.seen(p.requires_seen)
            seen = scan.total(f"{tag}_seen", f"sum({count})")
        carried = _carry_triage(scan, tag, real, judged)

        def read(row: Row, ctx: Context) -> Judged:
            n, broken = int(row[sample]), int(row[value])
            never_seen = seen is not None and int(row[seen]) == 0
            # Sessions by first_seen, or trigger events by ts (then the id's hash).
            ids = tuple(str(item["id"]) for item in row[evidence])
            if never_seen:
                reason = f"no {', '.join(p.requires_seen)} event within lookback:"
                reason += " the source cannot be judged"
            else:
                reason = f"no {p.noun[:-1]} had an obligation due in the window"
            result = verdict(
                spec,
                float(broken),
                n,
                f"{broken} of {n} {p.noun} {p.breach_phrase}",
                Evidence(sessions=ids) if p.counted is Counted.SESSIONS else Evidence(events=ids),
                no_data=n == 0 or never_seen,
                no_data_summary=reason,
            )
            breached = result.status is Status.BREACHED
            triage = carried(row, p.obligations) if carried and breached else None
            return Judged(result, triage)

        return read

    def describe(self, params: Coverage) -> Described:
        return [item for ob in params.obligations for item in ob.described()]

    def obligations(self, params: Coverage) -> Sequence[Obligation]:
        return params.obligations

    def judges(self, scan: SessionScan, spec: CheckSpec) -> str:
        """Real sessions in the check's scope (its session_filter, else the source's)."""
        return f"real AND {scan.scoped(spec.id, self.of(spec).session_filter)}"

    def payload_names(self, params: Coverage) -> Sequence[str]:
        """Triggers a payload field may exempt (trivial human messages)."""
        return [name for ob in params.obligations if ob.skip for name in ob.triggers]

    def session_filter(self, params: Coverage) -> str | None:
        return params.session_filter

    def from_config(self, config: CoverageConfig) -> tuple[Coverage, Unit]:
        required = " or ".join(config.required)
        if config.trigger:
            label = f"{required} after {' or '.join(config.trigger)}"
            if config.until:
                label += f", before {' or '.join(config.until)}"
            obligation = Obligation(
                anchor=Anchor.EVENT,
                required=config.required,
                grace_ms=duration_ms(config.grace),
                lead_ms=duration_ms(config.lead),
                triggers=config.trigger,
                until=config.until,
                label=label,
            )
        else:
            obligation = Obligation(
                anchor=Anchor.START,
                required=config.required,
                grace_ms=duration_ms(config.grace),
                label=f"{required} at the start",
            )
        counted = Counted(config.count)
        params = Coverage(
            obligations=(obligation,),
            noun="events" if counted is Counted.EVENTS else "sessions",
            breach_phrase=f"missed {required}",
            session_filter=config.session_filter,
            counted=counted,
        )
        return params, config.unit


TriageReader = Callable[[Row, tuple[Obligation, ...]], Triage]
# A session evidence lists, and one the triage lists with its figures: per obligation, its
# unmet count and whether the session had an end event.
_SESSION = "Tuple(first_seen Int64, id String)"
_FAILING = "Tuple(first_seen Int64, id String, last_seen Int64, events UInt64, flags Array(UInt64))"


def _carry_triage(
    scan: SessionScan, tag: str, real: str, judged: list[Judging]
) -> TriageReader | None:
    """Carry the check's triage out of the scan, when it has dimensions: its failing sessions
    counted, by each dimension of their first event, and the oldest 20 with their figures."""
    if scan.dims is None:
        return None
    first = scan.first_dims()
    failed = scan.per_session(
        f"{tag}_failed", f"{real} AND ({' + '.join(j.unmet for j in judged)}) > 0"
    )
    # Per obligation: (unmet count, whether the session had an end event).
    flags = ", ".join(
        f"{j.unmet}, toUInt8({j.has_end})" if j.has_end else f"{j.unmet}, toUInt8(1)"
        for j in judged
    )
    items = scan.total(f"{tag}_items", f"countIf({failed})")
    oldest = scan.total(
        f"{tag}_sessions",
        f"groupArraySortedIf({EVIDENCE})"
        f"(CAST((first_seen, session_id, last_seen, n_events, [{flags}]) AS {_FAILING}), {failed})",
    )
    by_dim = {
        d: scan.total(f"{tag}_by_{d}", f"sumMapIf(([{alias}], [toUInt64(1)]), {failed})")
        for d, alias in zip(scan.dims, first, strict=True)
    }

    def read(row: Row, obligations: tuple[Obligation, ...]) -> Triage:
        sessions = tuple(
            FailingSession(
                session_id=str(s["id"]),
                first_seen=from_ms(int(s["first_seen"])),
                last_seen=from_ms(int(s["last_seen"])),
                events=int(s["events"]),
                missed=_missed(obligations, s["flags"]),
            )
            for s in row[oldest] or []
        )
        counts = {d: row[alias] for d, alias in by_dim.items()}
        return grouped(int(row[items]), counts, list(by_dim), noun="sessions", sessions=sessions)

    return read


def _missed(obligations: Sequence[Obligation], flags: Sequence[int]) -> tuple[str, ...]:
    """What one failing session missed, from its (unmet count, ended) flags per obligation."""
    found = []
    for k, ob in enumerate(obligations):
        count, ended = int(flags[2 * k]), int(flags[2 * k + 1])
        if count:
            label = ob.missed(silent=not ended)
            found.append(label if count == 1 else f"{label} x{count}")
    return tuple(found)


KIND = CoverageKind()
