"""What the SLO ledger costs: a 30-day backfill and the burn tick, at 20M events a day (issue 42).

python -m benchmarks.slo                              # 30 days at 20M events a day (600M events)
python -m benchmarks.slo --days 3 --per-day 2000000   # a quick look
python -m benchmarks.slo --reps 5

The data: a day of synthetic telemetry (benchmarks.generate, the `memory` mix: a recall on
every turn, four events in five memory events, every SLO's check breaching now and then), its
narrow table built by `schema apply --materialize`'s own statements, then that narrow day laid
down `days` times, a day earlier each time, every session and event id suffixed with its day
(`~<k>`), into one narrow table ordered by time: `days` x `per_day` events read through the
`normalized` preset, what a large deployment's SLOs read. Generating and materializing 600M
events directly would take hours on two cores; a copied day is as real as a generated one.

Then, as fresh processes, each timing its own work after opening the store:

- `backfill`: `slo backfill`'s work (`watchdog.runner.slo.backfill`) over the days but the
  last `reps` hours (and the day before them, empty: judged without a scan), into an empty
  ledger: every bucket of the three built-in SLOs; timed once (most of an hour at 600M events
  on two cores), the ledger the ticks then read;
- `tick`: twelve burn ticks, one per 5-minute boundary of the next hour, each what the daemon's
  burn tick does before its alerts (`catch_up` judging the one bucket just closed, then every
  SLO's figures read off the ledger); a rep's ticks are each one sample, each rep ticking an
  hour further, so every tick judges exactly one new bucket;
- `check`: one `check` of the 4h window at the table's end (`run_once`), for scale.

The same on the day's raw joelclaw table (its sorting key starts with the event id, not time:
a tick reads the time column of every part overlapping its minutes,
docs/slo.md#what-a-burn-tick-costs). Each reports its seconds and the rows it selected
(ClickHouse's `SelectedRows`). A bucket whose check errs, or a check in `error`, stops the
benchmark instead of printing a figure. Results go under `slo` in benchmarks/results.json;
quote medians, never one sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.generate import INSERT_SETTINGS, row_count
from benchmarks.guard import ErroredChecks, exit_code, refuse_errors
from benchmarks.run import Bench, bench_arguments, bench_of, record_results
from checks.materialize import COLUMNS
from watchdog.core.times import rfc3339

RESULTS = Path(__file__).with_name("results.json")
PERIOD = timedelta(days=30)  # the built-in SLOs' period
MIX = "memory"  # a recall on every turn: four events in five count for an SLO
NARROW_COLUMNS = tuple(COLUMNS)

_CHILD = """
import json, sys, time
from datetime import datetime, timedelta
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import open_store
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS
from watchdog.runner.slo import backfill, catch_up, slo_reports
mode, url, source, database, start, end = sys.argv[1:7]
settings = settings_from_mapping(
    {"store": {"url": url, "database": database}, "source": json.loads(source)},
    plugins=PLUGINS, env={},
)
start, end = datetime.fromisoformat(start), datetime.fromisoformat(end)
COUNTERS = "SELECT event, value FROM system.events WHERE event = 'SelectedRows'"
found = {"seconds": [], "selected_rows": [], "judged": 0, "failed": 0, "passes": 0}
with open_store(url, query_timeout_s=7200) as store:
    def timed(work):
        before = dict(store.query(COUNTERS).rows).get("SelectedRows", 0)
        started = time.perf_counter()
        done = work()
        found["seconds"].append(time.perf_counter() - started)
        after = dict(store.query(COUNTERS).rows).get("SelectedRows", 0)
        found["selected_rows"].append(after - before)
        return done
    if mode == "backfill":
        done = timed(lambda: backfill(store, settings, start, end, end + timedelta(hours=1)))
        found.update(judged=done.judged, failed=done.failed, passes=done.passes)
    elif mode == "tick":
        bucket, delay = settings.slo.bucket, settings.schedule.delay
        for k in range(1, int((end - start) / bucket) + 1):
            at = start + k * bucket
            def tick(at=at):
                done = catch_up(store, settings, at, at + delay)
                slo_reports(store, settings, at)
                return done
            done = timed(tick)
            found["judged"] += done.judged
            found["failed"] += done.failed
            found["passes"] += done.passes
    else:
        report = timed(lambda: run_once(store, settings, window_at(settings, end)))
        found["checks"] = {k: {"status": c["status"], "summary": c["summary"]}
                           for k, c in json.loads(render_json(report))["checks"].items()}
print(json.dumps(found))
"""


def _child(
    mode: str, url: str, source: dict[str, Any], database: str, span: tuple[datetime, datetime]
) -> dict[str, Any]:
    """One fresh process doing `mode` over `span`; what it measured."""
    started = time.perf_counter()
    command = [sys.executable, "-c", _CHILD, mode, url, json.dumps(source), database]
    done = subprocess.run(
        [*command, rfc3339(span[0]), rfc3339(span[1])], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"slo {mode} run failed: {done.stderr.strip().splitlines()[-3:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    where = f"slo {mode} on {source.get('state') or source['table']}"
    if found.get("checks") is not None:
        refuse_errors(where, found["checks"])
    if found["failed"]:
        raise ErroredChecks(where, {"buckets": f"{found['failed']} buckets could not be judged"})
    found["process_s"] = time.perf_counter() - started
    return found


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def _days_table(bench: Bench, day: str, days: int) -> tuple[str, int]:
    """The narrow `day` laid down `days` times (module docstring), unless already there; its
    name and rows."""
    store = bench.open()
    table = f"bench_slo.{day.replace('.', '_')}_x{days}"
    rows = int(store.query(f"SELECT count() AS n FROM {day}").first()["n"])
    if not bench.fresh and row_count(store, table) == rows * days:
        bench.log(f"  reusing {table}")
        return table, rows * days
    bench.log(f"  laying {day} ({rows:,} rows) down {days} times into {table} ...")
    started = time.perf_counter()
    store.command("CREATE DATABASE IF NOT EXISTS bench_slo")
    store.command(f"DROP TABLE IF EXISTS {table}")
    store.command(f"CREATE TABLE {table} AS {day}")
    store.command(f"ALTER TABLE {table} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1")
    shifted = {
        "event_id": "if({k:UInt32} = 0, event_id, concat(event_id, '~', toString({k:UInt32})))",
        "ts": "ts - toIntervalDay({k:UInt32})",
        "session_id": (
            "if(session_id = '' OR {k:UInt32} = 0, session_id,"
            " concat(session_id, '~', toString({k:UInt32})))"
        ),
    }
    columns = ", ".join(shifted.get(c, c) for c in NARROW_COLUMNS)
    for k in range(days):
        store.command(
            f"INSERT INTO {table} ({', '.join(NARROW_COLUMNS)}) SELECT {columns} FROM {day}"
            + INSERT_SETTINGS,
            {"k": k},
        )
    bench.log(f"  laid down in {time.perf_counter() - started:.1f}s")
    return table, rows * days


def run(bench: Bench, per_day: int, days: int) -> dict[str, Any]:
    """Backfill, ticks and a check on both sources, `bench.reps` times each, alternating."""
    bench.log(f"slo: {per_day * days:,} events over {days} days ({per_day:,} a day)")
    day, _ = bench.table("joelclaw", per_day, MIX)
    plan, built = bench.narrow_table("joelclaw", per_day, day, MIX)
    table, rows = _days_table(bench, plan.table, days)
    sources = {
        "narrow": {"preset": "normalized", "table": table},
        "raw": {"preset": "joelclaw", "table": day},
    }
    at, reps, hour = bench.at, bench.reps, timedelta(hours=1)
    # From before the table's first day and the SLOs' period, so that every bucket a tick's
    # catch-up looks at is judged (those before the first event: without a scan); the last
    # `reps` hours are left to the ticks, rep r ticking through hour r.
    backfilled = (at - max(timedelta(days=days), PERIOD) - timedelta(days=1), at - reps * hour)
    runs: dict[str, list[dict[str, Any]]] = {}
    _drop_ledgers(bench)  # an interrupted run's: the backfill must start from an empty ledger
    with bench.closed():
        for rep in range(reps):
            for name, source in sources.items():
                ledger = f"watchdog_bench_slo_{name}"
                if rep == 0:  # timed once (most of an hour at 600M events): the ticks' ledger
                    bench.log(f"  backfilling {name} ...")
                    runs[f"backfill_{name}"] = [
                        _child("backfill", bench.url, source, ledger, backfilled)
                    ]
                ticked = (backfilled[1] + rep * hour, backfilled[1] + (rep + 1) * hour)
                runs.setdefault(f"tick_{name}", []).append(
                    _child("tick", bench.url, source, ledger, ticked)
                )
                runs.setdefault(f"check_{name}", []).append(
                    _child("check", bench.url, source, ledger, (at - 4 * hour, at))
                )
        _drop_ledgers(bench)
    found: dict[str, Any] = {
        "events": rows,
        "per_day": per_day,
        "days": days,
        "mix": MIX,
        "table": table,
        "raw_table": day,
        "narrow_built_s": None if built is None else round(built, 1),
        "repetitions": reps,
        "judged_buckets": runs["backfill_narrow"][0]["judged"],
        "backfill_passes": runs["backfill_narrow"][0]["passes"],
    }
    for key, measured in runs.items():
        seconds = [s for m in measured for s in m["seconds"]]
        selected = [r for m in measured for r in m["selected_rows"]]
        found[key] = {
            "median_s": _median(seconds),
            "samples_s": [round(s, 4) for s in seconds],
            "selected_rows_median": int(statistics.median(selected)),
        }
    found["tick_over_check"] = {
        name: round(found[f"tick_{name}"]["median_s"] / found[f"check_{name}"]["median_s"], 4)
        for name in sources
    }
    bench.log("  " + _line(found))
    return found


def _drop_ledgers(bench: Bench) -> None:
    """The watchdog databases the runs wrote their ledgers to (the tables stay for reuse)."""
    store = bench.open()
    for name in ("narrow", "raw"):
        store.command(f"DROP DATABASE IF EXISTS watchdog_bench_slo_{name}")
    bench.close()


def _line(found: dict[str, Any]) -> str:
    keys = [
        f"{what}_{name}" for what in ("backfill", "tick", "check") for name in ("narrow", "raw")
    ]
    return "  ".join(
        f"{key} {found[key]['median_s']:.3f}s ({found[key]['selected_rows_median']:,} rows)"
        for key in keys
    )


def render(found: dict[str, Any]) -> str:
    """The medians, each with the rows it selected."""
    per_day = found["per_day"]
    lines = [
        f"narrow: {found['events']:,} events over {found['days']} days ({per_day:,} a day), the"
        f" normalized preset; raw: the day's {per_day:,} events, the joelclaw preset (id first)",
        f"the 30-day backfill judged {found['judged_buckets']:,} buckets (3 SLOs) in"
        f" {found['backfill_passes']} passes",
        f"{'':<8}{'backfill':>24}{'one tick':>24}{'one check (4h)':>24}{'tick/check':>12}",
    ]
    for name in ("narrow", "raw"):

        def cell(key: str) -> str:
            c = found[key]
            return f"{c['median_s']:>10.3f}s {c['selected_rows_median']:>11,}r"

        lines.append(
            f"{name:<8}{cell(f'backfill_{name}')}{cell(f'tick_{name}')}{cell(f'check_{name}')}"
            f"{found['tick_over_check'][name]:>11.4f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.slo", description=__doc__)
    parser.add_argument("--per-day", type=int, default=20_000_000)
    parser.add_argument("--days", type=int, default=30)
    bench_arguments(parser, RESULTS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    bench = bench_of(args)
    try:
        found = run(bench, args.per_day, args.days)
    finally:
        bench.close()
    output = Path(args.output)
    command = " ".join(["python -m benchmarks.slo", *(sys.argv[1:] if argv is None else argv)])
    record_results(output, "slo", command, found)
    print()
    print(render(found))
    print(f"\nin {time.perf_counter() - started:.0f}s; results in {output}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
