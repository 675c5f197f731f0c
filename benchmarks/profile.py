"""`python -m benchmarks.profile`: where one evaluation's time goes, query by query.

E.g. `python -m benchmarks.profile --events 5000000 --preset joelclaw --preset otel_logs`: uses
(or generates) the benchmark's tables, and times the floor and each of the suite's queries
(`run_once`'s per-query timer), with and without the triage carried, then each triage query the
evaluation does not carry; medians of `--reps`, each also as a ratio to the floor
(docs/performance.md#where-the-paths-miss-the-per-query-profile). With `--state`, the run reads
the session state (built as the benchmark builds it) and every store call of the evaluation is
timed, named by the function of ours that made it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.floor import floor_sql
from benchmarks.generate import DEFAULT_AT, MIXES
from benchmarks.guard import exit_code, refuse_errors
from benchmarks.run import Bench, settings_for
from checks.evaluate import QueryTimer
from checks.state.layout import STATE_TABLE
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at

_OURS = ("/checks/", "/alerts/", "/watchdog/")


def _caller() -> str:
    """The innermost function of ours (outside the store module) on the stack: module.function."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename.replace("\\", "/")
        if any(part in path for part in _OURS) and not path.endswith("watchdog/core/store.py"):
            module = path.rsplit("/", 2)
            return f"{module[-2]}/{module[-1].removesuffix('.py')}.{frame.name}"
    return "?"


@contextmanager
def each_call_timed(store: Store, seconds: dict[str, list[float]], prefix: str) -> Iterator[None]:
    """Every `store.query` in the block timed into `seconds`, named by its caller (summed over
    the calls of one caller in the block)."""
    original: Callable[..., Any] = store.query
    found: dict[str, float] = defaultdict(float)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            found[prefix + _caller()] += time.perf_counter() - started

    store.query = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store.query
        for name, total in found.items():
            seconds[name].append(total)


def _state_settings(bench: Bench, preset: str, table: str, events: int, mix: str) -> Settings:
    """The case's source read with the session state beside it (built unless there)."""
    plan, _ = bench.narrow_table(preset, events, table, mix)
    return settings_for(bench.url, preset, table, f"{plan.database}.{STATE_TABLE}")


def profile(
    bench: Bench, preset: str, events: int, mix: str = "today", state: bool = False
) -> dict[str, list[float]]:
    """Seconds per repetition: the floor, each query (named by its checks), the totals.

    The evaluation is timed twice: as `check --format text` runs it, and with
    the triage (as `check --format json` and the daemon run it: the scans carry
    what they can, the kinds query the rest).
    """
    table, _ = bench.table(preset, events, mix)
    raw = settings_for(bench.url, preset, table)
    settings = _state_settings(bench, preset, table, events, mix) if state else raw
    store = bench.open()
    window = window_at(settings, DEFAULT_AT)
    sql, params = floor_sql(store, raw)
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
        with each_call_timed(store, seconds, "json, store calls by caller: "):
            carried = run_once(
                store, settings, window, timed=timer("carrying triage: "), triage=True
            )
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
    parser.add_argument(
        "--state", action="store_true", help="read the session state (source.state) beside it"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bench = Bench(directory=Path(args.dir), reps=args.reps)
    try:
        for preset in args.preset or ["joelclaw", "otel_logs"]:
            seconds = profile(bench, preset, args.events, args.mix, args.state)
            floor = statistics.median(seconds["floor"])
            where = " on the session state" if args.state else ""
            print(
                f"{preset} ({args.mix} mix) at {args.events:,} events{where},"
                f" medians of {args.reps}:"
            )
            for name, samples in seconds.items():
                median = statistics.median(samples)
                print(f"  {median:7.3f} s  {median / floor:5.2f}x floor  {name}")
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
