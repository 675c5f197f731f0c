"""Freshness: seconds from the newest event (of some names, or any) to the evaluation time.

telemetry_freshness and `kind = "freshness"` custom checks
(docs/checks.md#your-own-checks). Judged in the session scan; when the
lookback holds no such event, the whole table is asked for its newest one
before `at`, so a source silent for longer than the lookback still says since
when. No event at all is `breached` with no value: silence is not health.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from checks.base import CheckSpec, KindParams, Unit
from checks.evidence import Evidence
from checks.kinds.base import Declared, Described
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.verdict import judge
from watchdog.core.durations import human_duration
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.times import from_ms

# 1900-01-01T00:00:00Z, the earliest time a DateTime64 holds: "the whole table" as a read
# range. (-2**62 overflowed the conversion to a DateTime64(9) source, otel_logs' Timestamp.)
EARLIEST_MS = -2_208_988_800_000


@dataclass(frozen=True)
class Freshness(KindParams):
    """Seconds from the newest event (of `events`, or of any name) to `at`."""

    events: tuple[str, ...] = ()


class FreshnessConfig(CustomCheck):
    """Seconds since the newest of `events` (or of any event)."""

    kind: Literal["freshness"]
    events: tuple[str, ...] = ()

    @property
    def unit(self) -> Unit:
        """Seconds: a target is a duration (`4h`) or a number of seconds."""
        return Unit.S


def _newest_ever(ctx: Context, p: Freshness) -> int | None:
    """The newest event before `at` in the whole table, when the lookback holds none."""
    at = ctx.window.at
    earliest = replace(ctx.window, lookback=at - from_ms(EARLIEST_MS))
    whole = replace(ctx, source=ctx.source.events_source, window=earliest)
    names = "name IN {fresh_names:Array(String)}" if p.events else ""
    sql = whole.source.select("count() AS n, max(t) AS newest", where=names)
    row = whole.aggregate(sql, {"fresh_names": list(p.events)})
    return int(row["newest"]) if row.get("n") else None


class FreshnessKind(Declared[Freshness, FreshnessConfig]):
    name = "freshness"
    params = Freshness
    config = FreshnessConfig
    triaged = False  # one value, the newest event's age: nothing to break down
    unexplained = "the newest event's age is a fact of the source, not of one session"

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.session(spec)
        newest, count = "newest", "events"  # the scan's own totals: any event
        if p.events:
            tag = scan.tag()
            seen, newest_seen = scan.seen(p.events)
            newest = scan.total(f"{tag}_newest", f"maxIf({newest_seen}, {seen} > 0)")
            count = scan.total(f"{tag}_count", f"sum({seen})")

        def read(row: Row, ctx: Context) -> Judged:
            found = row[newest] if row[count] else None
            if found is None:
                found = _newest_ever(ctx, p)
            if found is None:
                summary = "no event at all before the evaluation time: silence is not health"
                return Judged(judge(spec, None, 0, summary, Evidence(no_event=True)))
            age = (ctx.window.params()["at_ms"] - int(found)) / 1000
            summary = f"newest event {human_duration(age)} before the evaluation time"
            # The value comes from one event, the newest: a sample of one, whatever the duplicates.
            return Judged(judge(spec, age, 1, summary, Evidence(newest=from_ms(int(found)))))

        return read

    def describe(self, params: Freshness) -> Described:
        return [("newest of", ", ".join(params.events) if params.events else "any event")]

    def from_config(self, config: FreshnessConfig) -> tuple[Freshness, Unit]:
        return Freshness(events=config.events), config.unit


KIND = FreshnessKind()
