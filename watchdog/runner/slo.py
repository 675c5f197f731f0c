"""The SLO ledger: buckets judged once into `slo_buckets`, caught up by every recording run,
backfilled over days, and the figures read off it (docs/slo.md#the-ledger).

A bucket is judged when its end + `schedule.delay` has passed (and, for a run at `at`, when it
ends by `at`); every recording run first judges the buckets of each SLO's period not judged
yet (`catch_up`), `slo backfill` those of a range (`backfill`). Both judge in passes of about
`PASS_EVENTS` events, each one read of the checks' scans (`checks.slo.counts`), and skip the
buckets already judged, so an interrupted backfill resumes where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from alerts.rows import SloBucketRow
from alerts.slo import SloJudgement
from alerts.state import ensure_schema, ledger_starts, ledger_sums, save_buckets
from checks.base import Report, SloReport, Window
from checks.builtin import configured_checks
from checks.kinds import session_scopes
from checks.slo.budget import Alert, TierState, bucket_floor, figures_of, lengths
from checks.slo.counts import (
    bad_event_ids,
    bucket_lookback,
    bucket_windows,
    judge_buckets,
    oldest_event,
)
from checks.slo.specs import slo_specs
from checks.sources import CompiledSource, open_source
from watchdog.core.errors import StoreError
from watchdog.core.logs import said
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.text import plural
from watchdog.core.times import from_ms, to_ms

log = logging.getLogger(__name__)

# How many events one pass reads, about (the events of 6 hours at 20M a day): a pass groups
# its span's sessions at once, so its memory and time grow with them while the passes' total
# does not, and each must finish within the store's query timeout. At 20M events a day a week
# a pass took minutes and its session scan failed (benchmarks/slo.py); on little data, many
# short passes cost their queries' overhead each. Passes are sized to hold about this many
# events, from an hour to a week of buckets (docs/slo.md#the-ledger).
PASS_EVENTS = 5_000_000
PASS_SPANS = (timedelta(hours=1), timedelta(days=7))


# Told how far a judging has come: the bucket times judged so far (each for every SLO missing
# it), and how many it will judge.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Judging:
    """What one catch-up or backfill did: the buckets it judged, those whose check could not
    run (left unjudged, for a later run), and the passes it took."""

    judged: int
    failed: int
    passes: int


def judgeable_until(settings: Settings, at: datetime, now: datetime) -> datetime:
    """The end of the newest bucket a run at `at` may judge at wall time `now`: ending by `at`,
    and `schedule.delay` past its end (late events have arrived)."""
    bucket = settings.slo.bucket
    return min(bucket_floor(at, bucket), bucket_floor(now - settings.schedule.delay, bucket))


def _missing(
    store: Store, settings: Settings, ranges: Mapping[str, tuple[datetime, datetime]]
) -> tuple[dict[str, set[datetime]], bool]:
    """Per SLO named in `ranges`, the bucket starts of its range the ledger does not hold (one
    read of the ledger for all), and whether the ledger exists."""
    bucket = settings.slo.bucket
    step = int(bucket.total_seconds() * 1000)
    first, last = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
    source = settings.source.display_name
    judged = ledger_starts(store, settings, source, list(ranges), first, last)
    missing = {}
    for name, (start, end) in ranges.items():
        held = (judged or {}).get(name, set())
        begin, count = to_ms(start), max(0, (end - start) // bucket)
        wanted = (begin + i * step for i in range(count))
        missing[name] = {from_ms(ms) for ms in wanted if ms not in held}
    return missing, judged is not None


def judge_range(
    store: Store,
    settings: Settings,
    ranges: Mapping[str, tuple[datetime, datetime]],
    now: datetime,
    progress: Progress | None = None,
) -> Judging:
    """Judge, for each SLO named in `ranges`, the buckets of its range the ledger lacks.

    The SLOs' missing buckets are judged together, an hour to a week of them at a time (about
    `PASS_EVENTS` events), each chunk one pass over
    every SLO's check; each SLO records only its own missing buckets. A bucket whose check
    errs is left unjudged.
    """
    specs = configured_checks(settings)
    slos = [s for s in slo_specs(settings, specs) if s.name in ranges]
    if not slos:
        return Judging(0, 0, 0)
    missing, exists = _missing(store, settings, {s.name: ranges[s.name] for s in slos})
    starts = sorted(set().union(*missing.values()))
    if not starts:
        return Judging(0, 0, 0)
    if not exists:
        ensure_schema(store, settings)
    source = open_source(store, settings.source, session_scopes(specs))
    bucket = settings.slo.bucket
    lookback = bucket_lookback(settings, slos)
    judged = failed = passes = 0
    name = settings.source.display_name
    # The buckets ending by the oldest event they read read nothing: judged empty, unscanned
    # (a backfill's days before the data; a tick's one bucket is judged without the probe).
    empty: list[datetime] = []
    size = max(1, PASS_SPANS[1] // bucket)
    if len(starts) > 1:
        span = (starts[0] + bucket - lookback, starts[-1] + bucket)
        oldest, events = oldest_event(store, source, *span)
        empty = [s for s in starts if oldest is None or s + bucket <= oldest]
        per_bucket = events / max(1, (span[1] - span[0]) // bucket)
        fits = int(PASS_EVENTS / per_bucket) if per_bucket else size
        size = max(PASS_SPANS[0] // bucket, min(size, fits))
    if empty:
        rows = [
            SloBucketRow(name, slo.name, s, 0, 0, now)
            for slo in slos
            for s in empty
            if s in missing[slo.name]
        ]
        save_buckets(store, settings, rows)
        judged += len(rows)
    total, skipped = len(starts), len(empty)
    if progress is not None and skipped:
        progress(skipped, total)
    starts = starts[skipped:]
    for i in range(0, len(starts), size):
        chunk = starts[i : i + size]
        found = judge_buckets(store, source, slos, bucket_windows(chunk, bucket, lookback))
        passes += 1
        rows = []
        for slo in slos:
            for start, counted in zip(chunk, found[slo.name], strict=True):
                if start not in missing[slo.name]:
                    continue
                if counted is None:
                    failed += 1
                    continue
                rows.append(SloBucketRow(name, slo.name, start, counted.good, counted.bad, now))
        save_buckets(store, settings, rows)
        judged += len(rows)
        if progress is not None:
            progress(skipped + min(i + size, len(starts)), total)
    return Judging(judged, failed, passes)


def catch_up(
    store: Store, settings: Settings, at: datetime, now: datetime, progress: Progress | None = None
) -> Judging:
    """What every recording run does first: judge each SLO's buckets within its period before
    the run's time that are not judged yet (docs/slo.md#the-ledger)."""
    end = judgeable_until(settings, at, now)
    ranges = {name: (end - t.period, end) for name, t in settings.slo.enabled.items()}
    return judge_range(store, settings, ranges, now, progress)


def backfill(
    store: Store,
    settings: Settings,
    start: datetime,
    end: datetime,
    now: datetime,
    progress: Progress | None = None,
) -> Judging:
    """`slo backfill`: judge every SLO's buckets of `[start, end)` not judged yet (the range
    cut to whole buckets, and to those judgeable at `now`)."""
    bucket = settings.slo.bucket
    last = min(bucket_floor(end, bucket), judgeable_until(settings, end, now))
    first = bucket_floor(start, bucket)
    ranges = dict.fromkeys(settings.slo.enabled, (first, max(first, last)))
    return judge_range(store, settings, ranges, now, progress)


def slo_reports(store: Store, settings: Settings, at: datetime) -> dict[str, SloReport]:
    """Each enabled SLO at the bucket boundary at or before `at`, read from the ledger (the
    buckets judged so far: their share of the period is the coverage), by name; one read of
    the ledger for all of them."""
    slos = slo_specs(settings, configured_checks(settings))
    if not slos:
        return {}
    end = bucket_floor(at, settings.slo.bucket)
    sums = ledger_sums(
        store,
        settings,
        settings.source.display_name,
        {s.name: lengths(s.params) for s in slos},
        end,
    )
    return {
        slo.name: SloReport(slo, figures_of(slo.params, (sums or {}).get(slo.name, {}), end))
        for slo in slos
    }


# The note of a report whose SLOs could not be read from the ledger: its checks' verdicts stand.
SLOS_LOST = "the SLOs could not be read from the ledger ("


def with_slos(store: Store, settings: Settings, report: Report) -> Report:
    """`report` with its SLOs at its time (`slo_reports`). A store error reading the ledger
    never costs the checks' verdicts: the report keeps them, without SLOs, and says so in its
    notes (as a lost details lookup does, checks.listed)."""
    try:
        slos = slo_reports(store, settings, report.window.at)
    except StoreError as exc:
        return replace(report, notes=(*report.notes, f"{SLOS_LOST}{exc.problem})"))
    return replace(report, slos=slos)


def with_bad_events(
    store: Store, settings: Settings, judgements: Sequence[SloJudgement]
) -> list[SloJudgement]:
    """`judgements` with, for each alert a tier of which fires, the ids of bad events in the
    shortest short window of its firing tiers (what its message names, docs/slo.md#alerts):
    the SLO's check over that window, read as a bucket is (its lead before it). Looked up only
    for a firing alert; a store error leaves the ids out, never the alert."""
    found = []
    source: CompiledSource | None = None  # opened for the first firing alert
    for judgement in judgements:
        figures, named = judgement.figures, dict(judgement.bad_events)
        for alert in Alert:
            firing = [
                t.tier.short
                for t in figures.tiers
                if t.tier.alert is alert and t.state is TierState.FIRING
            ]
            if not firing or alert in named:
                continue
            short, slo = min(firing), judgement.spec
            lead = bucket_lookback(settings, [slo]) - settings.slo.bucket
            window = Window(at=figures.at, length=short, lookback=short + lead)
            try:
                if source is None:
                    scopes = session_scopes(configured_checks(settings))
                    source = open_source(store, settings.source, scopes)
                named[alert] = bad_event_ids(store, source, slo, window)
            except StoreError as exc:
                log.warning("the bad events of SLO %s could not be read: %s", slo.name, exc.problem)
        found.append(replace(judgement, bad_events=named))
    return found


def judge_before_run(store: Store, settings: Settings, at: datetime, now: datetime) -> None:
    """A recording run's first step (a daemon tick, `check --notify`): `catch_up`, a failure
    logged and left to the next run (the run itself then meets the same store, or not)."""
    try:
        done = catch_up(store, settings, at, now)
    except StoreError as exc:
        # One line, as a command's other problems are said (`memory-watchdog: ...` on a terminal).
        said(f"the SLO buckets could not be judged: {exc.problem}", level=logging.WARNING)
        return
    if done.judged or done.failed:
        log.info(
            "judged %s in %s (%d could not be)",
            plural(done.judged, "SLO bucket"),
            plural(done.passes, "pass", "passes"),
            done.failed,
        )
