"""`python -m benchmarks.profile`: where one evaluation's time goes, query by query.

E.g. `python -m benchmarks.profile --events 5000000 --preset joelclaw --preset otel_logs`: uses
(or generates) the benchmark's tables, and times the floor and each of the suite's queries
(`run_once`'s per-query timer), with and without the triage carried, then each triage query the
evaluation does not carry; medians of `--reps`, each also as a ratio to the floor
(docs/performance.md#where-the-paths-miss-the-per-query-profile).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from benchmarks.floor import floor_sql
from benchmarks.generate import DEFAULT_AT, MIXES
from benchmarks.guard import exit_code, refuse_errors
from benchmarks.run import Bench, settings_for
from checks.evaluate import QueryTimer
from watchdog.runner.once import run_once, window_at


def profile(bench: Bench, preset: str, events: int, mix: str = "today") -> dict[str, list[float]]:
    """Seconds per repetition: the floor, each query (named by its checks), the totals.

    The evaluation is timed twice: as `check --format text` runs it, and with
    the triage (as `check --format json` and the daemon run it: the scans carry
    what they can, the kinds query the rest).
    """
    table, _ = bench.table(preset, events, mix)
    store = bench.open()
    settings = settings_for(bench.url, preset, table)
    window = window_at(settings, DEFAULT_AT)
    sql, params = floor_sql(store, settings)
    params = {**params, **window.params()}
    seconds: dict[str, list[float]] = defaultdict(list)

    def timer(prefix: str) -> QueryTimer:
        def timed(ids: Sequence[str], started_ns: int, ended_ns: int) -> None:
            seconds[prefix + ", ".join(ids)].append((ended_ns - started_ns) / 1e9)

        return timed

    for _ in range(bench.reps):
        started = time.perf_counter()
        store.query(sql, params)
        seconds["floor"].append(time.perf_counter() - started)
        started = time.perf_counter()
        plain = run_once(store, settings, window, timed=timer(""))
        seconds["the whole evaluation (text)"].append(time.perf_counter() - started)
        started = time.perf_counter()
        carried = run_once(store, settings, window, timed=timer("carrying triage: "), triage=True)
        seconds["evaluation + triage (json)"].append(time.perf_counter() - started)
        for label, report in (("text", plain), ("json", carried)):
            refuse_errors(f"{table}: the evaluation ({label})", report.to_json()["checks"])
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--preset", action="append", choices=("joelclaw", "otel_logs"))
    parser.add_argument("--mix", choices=MIXES, default="today")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/memory-watchdog-bench")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bench = Bench(directory=Path(args.dir), reps=args.reps)
    try:
        for preset in args.preset or ["joelclaw", "otel_logs"]:
            seconds = profile(bench, preset, args.events, args.mix)
            floor = statistics.median(seconds["floor"])
            print(f"{preset} ({args.mix} mix) at {args.events:,} events, medians of {args.reps}:")
            for name, samples in seconds.items():
                median = statistics.median(samples)
                print(f"  {median:7.3f} s  {median / floor:5.2f}x floor  {name}")
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
