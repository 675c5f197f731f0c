"""A bucket's good and bad events: the SLO's check judged over the bucket as its window.

Each bucket `[start, start + bucket)` is one window of the check's own scan, and all the
buckets of a range are judged in one pass (`checks.evaluate.evaluate_windows`, one row per
bucket), so a bucket counts exactly what the check counts: its roles, scope, session filter,
data-quality rules and de-duplication; a completed or failed outcome in the bucket of its
`ts`, a lost one in the bucket of its deadline, a latency in the bucket of its `ts`, bad at or
above the target (the kind's `slo_counts`). docs/slo.md#buckets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from checks.base import SloSpec, Status, Window
from checks.evaluate import evaluate_windows
from checks.kinds import kind_of
from checks.scans.plans import Context
from checks.scans.windows import Windows
from checks.slo.budget import Bucket
from checks.sources import CompiledSource
from watchdog.core.errors import RegistryError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms


def bucket_windows(starts: Sequence[datetime], bucket: timedelta, lookback: timedelta) -> Windows:
    """The windows of buckets starting at `starts`: each one bucket long, read from `lookback`
    before its end (the reach `check` gives a window of that length)."""
    return Windows(
        tuple(Window(at=s + bucket, length=bucket, lookback=lookback) for s in sorted(starts))
    )


def bucket_lookback(settings: Settings, slos: Sequence[SloSpec]) -> timedelta:
    """How far back from its end a bucket is read to judge `slos` over it: the bucket and the
    longest of their kinds' leads (an outcome rate's grace), so a burn tick reads its bucket's
    minutes and not the lookback; the window's whole reach when a kind cannot say
    (docs/slo.md#what-a-burn-tick-costs)."""
    bucket = settings.slo.bucket
    leads = [kind_of(slo.check).slo_lead(kind_of(slo.check).of(slo.check)) for slo in slos]
    if not leads or any(lead is None for lead in leads):
        return settings.window.reach(bucket)
    return bucket + max(lead for lead in leads if lead is not None)


def oldest_event(
    store: Store, source: CompiledSource, start: datetime, end: datetime
) -> tuple[datetime | None, int]:
    """The time of the source's oldest event in `[start, end)` (None: there is none) and how
    many events the span holds: the span the buckets being judged read, so that finding them
    costs no more than judging them.

    A bucket ending at or before the oldest reads no event at all, so its check counts nothing
    in it: it is judged (0 good, 0 bad) without a scan. The count sizes the passes.
    """
    window = Window(at=end, length=timedelta(0), lookback=end - start)
    ctx = Context(store, source.events_source, window)
    row = ctx.aggregate(ctx.source.select("count() AS n, min(t) AS oldest"), {})
    count = int(row.get("n") or 0)
    return (from_ms(int(row["oldest"])) if count else None), count


def judge_buckets(
    store: Store, source: CompiledSource, slos: Sequence[SloSpec], windows: Windows
) -> dict[str, list[Bucket | None]]:
    """Per SLO name, the bucket of each of `windows` (oldest first); None where its check could
    not run (an error: the bucket stays unjudged, to be judged by a later run).

    One pass for every SLO's check (each check once, however many SLOs follow it), disabled
    checks included and each over the bucket whatever its own window: an SLO follows its
    check's counting, not its verdict.
    """
    # Over each bucket as its window: a custom check's own window length does not apply.
    checks = {slo.check.id: replace(slo.check, enabled=True, window_ms=None) for slo in slos}
    reports = evaluate_windows(store, source, windows, list(checks.values()), details=False)
    found: dict[str, list[Bucket | None]] = {}
    for slo in slos:
        kind = kind_of(slo.check)
        column: list[Bucket | None] = []
        for window, report in zip(windows.windows, reports, strict=True):
            result = report.checks[slo.check.id]
            if result.status is Status.ERROR:
                column.append(None)
                continue
            counts = kind.slo_counts(result)
            if counts is None:
                raise RegistryError(f"slo.{slo.name}: kind {kind.name} counts no SLI")
            column.append(Bucket(window.start, *counts))
        found[slo.name] = column
    return found


def bad_event_ids(
    store: Store, source: CompiledSource, slo: SloSpec, window: Window
) -> tuple[str, ...]:
    """The ids of bad events the SLO's check names over `window` (its evidence: failed and lost
    outcomes, latencies at or above the target; the oldest 20), none when the check errs."""
    check = replace(slo.check, enabled=True, window_ms=None)
    (report,) = evaluate_windows(store, source, Windows((window,)), [check], details=False)
    result = report.checks[check.id]
    if result.status is Status.ERROR:
        return ()
    return tuple(result.evidence.events or ())
