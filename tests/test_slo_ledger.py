"""The SLO ledger (docs/slo.md#the-ledger): each bucket judged once, at its end + the schedule's
delay; catch-up in every recording run; a resumable backfill; figures read back from it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from alerts.rows import SloBucketRow
from alerts.slo import report_judgements
from alerts.state import load_buckets, save_buckets
from checks.slo.budget import Alert, Bucket, figures
from tests.builder import T0, H, M, Scenario, settings_for, unique_table
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import evaluate_once, run_once, window_at
from watchdog.runner.slo import backfill, catch_up, slo_reports, with_bad_events

DAY = timedelta(days=1)
BIN = Path(sys.executable).parent / "memory-watchdog"


def world(store: Store, config: dict[str, Any] | None = None) -> Settings:
    """A day of recalls and observes (some failed, some lost) around T0 + 12h, and settings
    keeping the watchdog's tables in a database of their own, with 1-day SLO periods."""
    sc = Scenario()
    for i in range(12):
        t = T0 + 6 * H + i * 37 * M
        sc.session(f"s{i}").starts(t).recalls(t + M, fails=i % 4 == 0).observes(
            t + 2 * M, fails=i % 5 == 0, lost=i % 6 == 0
        )
    table = unique_table()
    sc.write(store, table)
    periods = {name: {"period": "1d"} for name in ("observe_success", "recall_success")}
    base = {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}, "slo": periods}
    return settings_for(table, {**base, **(config or {})})


def stored(store: Store, settings: Settings, slo: str) -> dict[Any, tuple[int, int]]:
    rows = load_buckets(
        store, settings, settings.source.display_name, slo, T0 - 30 * DAY, T0 + 30 * DAY
    )
    return {r.start: (r.good, r.bad) for r in rows}


def test_a_catch_up_judges_every_bucket_of_the_period_once(store: Store) -> None:
    """A run at T judges the period's 288 buckets before T; the next run judges none again."""
    settings = world(store)
    at = T0 + DAY
    first = catch_up(store, settings, at, now=at + H)
    assert len(stored(store, settings, "observe_success")) == 288
    again = catch_up(store, settings, at, now=at + H)
    assert (first.failed, again.judged, again.passes) == (0, 0, 0)


def test_a_bucket_is_judged_only_once_its_end_plus_the_delay_has_passed(store: Store) -> None:
    """At wall time T + 1m (delay 2m), the bucket ending at T is not judged yet; at T + 2m it is."""
    settings = world(store)
    at = T0 + DAY
    catch_up(store, settings, at, now=at + M)
    assert at - 5 * M not in stored(store, settings, "recall_success")
    catch_up(store, settings, at, now=at + 2 * M)
    assert at - 5 * M in stored(store, settings, "recall_success")


def test_the_figures_from_the_ledger_are_the_checks_counts_over_the_period(store: Store) -> None:
    """Over a 1-day period ending at T, the ledger's good and bad are the check's over that day."""
    settings = world(store)
    at = T0 + DAY
    catch_up(store, settings, at, now=at + H)
    report = run_once(store, settings, window_at(settings, at, DAY))
    found = {name: r.figures for name, r in slo_reports(store, settings, at).items()}
    ev = report.checks["observe_failure_rate"].evidence
    figures = found["observe_success"]
    assert (figures.good, figures.bad) == (ev.completed, (ev.failed or 0) + (ev.lost or 0))
    assert figures.coverage == 1.0 and figures.bad > 0


def test_the_ledgers_sums_give_the_figures_its_buckets_give(store: Store) -> None:
    """The figures a tick reads (the ledger's sums per window, aggregated in the store) are
    those its buckets give, at every hour of a day judged in part (coverage below 1, windows
    with no judged bucket, buckets judged twice)."""
    settings = world(store)
    backfill(store, settings, T0 + 5 * H, T0 + 17 * H, now=T0 + 2 * DAY)
    source = settings.source.display_name
    again = SloBucketRow(source, "observe_success", T0 + 10 * H, 7, 3, T0 + 3 * DAY)
    save_buckets(store, settings, [again])  # a bucket judged again: the newer row counts
    for hour in range(0, 25, 3):
        at = T0 + hour * H
        for name, report in slo_reports(store, settings, at).items():
            params = report.spec.params
            rows = load_buckets(store, settings, source, name, at - params.period, at)
            buckets = [Bucket(r.start, r.good, r.bad) for r in rows]
            assert report.figures == figures(params, buckets, at), (name, at)


def test_a_backfill_resumes_skipping_the_judged_buckets(store: Store) -> None:
    """A backfill over a range half judged judges only the other half, with progress told."""
    settings = world(store)
    backfill(store, settings, T0, T0 + 12 * H, now=T0 + 2 * DAY)
    told: list[tuple[int, int]] = []
    done = backfill(
        store, settings, T0, T0 + DAY, now=T0 + 2 * DAY, progress=lambda d, t: told.append((d, t))
    )
    assert done.judged == 3 * 144  # three SLOs, the day's second half
    assert told[-1] == (144, 144)  # bucket times, each judged for the three SLOs
    assert len(stored(store, settings, "recall_latency")) == 288


def test_check_notify_judges_the_buckets_first(store: Store, store_url: str) -> None:
    """A recording run (`check --notify`) catches the ledger up before it evaluates."""
    settings = world(store)
    at = T0 + DAY
    evaluate_once(settings.with_store_url(store_url), at, None, recording=at + H)
    assert len(stored(store, settings, "observe_success")) == 288


def test_a_read_only_check_judges_nothing(store: Store, store_url: str) -> None:
    """`check` without --notify leaves the ledger as it is."""
    settings = world(store)
    evaluate_once(settings.with_store_url(store_url), T0 + DAY, None)
    assert stored(store, settings, "observe_success") == {}


@pytest.mark.slow
def test_slo_backfill_command_judges_a_range_with_progress(tmp_path: Path) -> None:
    """`slo backfill --from --to` reports progress on stderr, then what it judged; again, none."""
    url = f"chdb://{tmp_path / 'store'}"
    config = tmp_path / "watchdog.toml"
    config.write_text(
        '[source]\ntable = "t_cli.otel_events"\n[slo.observe_success]\nperiod = "1d"\n'
    )
    write = (  # a store of its own, made by another process (this one holds the tests' store)
        "from tests.builder import T0, H, Scenario\n"
        "from watchdog.core.store import open_store\n"
        "sc = Scenario()\nsc.session('s1').starts(T0 - 6 * H).recalls(T0 - 5 * H)\n"
        f"with open_store({url!r}, create=True) as store:\n"
        "    sc.write(store, 't_cli.otel_events')\n"
    )
    subprocess.run([sys.executable, "-c", write], check=True, cwd=Path(__file__).parents[1])

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(BIN),
                "slo",
                "backfill",
                "--config",
                str(config),
                "--store",
                url,
                "--from",
                "2026-11-27T00:00:00Z",
                "--to",
                "2026-11-28T00:00:00Z",
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    first, second = run(), run()
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[-1] == "memory-watchdog: slo backfill: 288/288 buckets judged"
    assert first.stdout.startswith("judged 864 SLO buckets from 2026-11-27T00:00:00Z")
    assert second.stdout.startswith("judged 0 SLO buckets")


def test_a_reports_firing_slo_alerts_name_bad_events_of_their_short_window(store: Store) -> None:
    """What `check --notify` hands the SLO alerts: the report's SLOs, each firing alert with
    the ids of bad events in its short window (failed observes of the burst's 5 minutes), the
    alerts that do not fire with none."""
    sc = Scenario()
    burst = T0 + 10 * M
    for i in range(20):
        sc.session(f"b{i}").starts(burst).observes(burst + M, fails=i % 2 == 0)
    sc.session("early").starts(T0).observes(T0 + M, fails=True)  # outside the 5m window
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table, {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}})
    at = T0 + 15 * M
    catch_up(store, settings, at, at + H)
    report = run_once(store, settings, window_at(settings, at, H))
    found = {j.spec.name: j for j in with_bad_events(store, settings, report_judgements(report))}
    observe = found["observe_success"]
    failed = {e.id for e in sc.events if e.name == "observe.store.failed" and e.ts >= burst}
    assert set(observe.bad_events[Alert.PAGE]) == failed
    assert Alert.TICKET in observe.bad_events  # the ticket tiers fire too over so few events
    assert found["recall_success"].bad_events == {}
