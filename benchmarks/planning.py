"""`python -m benchmarks.planning`: what the store's planning settings save on one evaluation.

E.g. `python -m benchmarks.planning --events 2000000 --reps 5`: in this process, one evaluation
(`run_once` and the JSON report) with `watchdog.core.store.PLANNING` sent, as the store sends it,
and one without it, alternating, `reps` times each, after one untimed run of each: on the demo's
100 sessions (a small source, as the test suite's and a quiet deployment's) and on the
benchmark's lean joelclaw table of `--events` events (generated unless there). Medians of CPU and
wall seconds; the two reports must be the same (docs/performance.md#planning-a-query).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import watchdog.core.store as store_module
from benchmarks.run import Bench, settings_for
from checks.base import Window
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.demo.data import write_demo
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at

CASES = ("sent", "not sent")


@contextmanager
def planning(sent: bool) -> Iterator[None]:
    """Stores made meanwhile send the planning settings (as they do), or do not."""
    kept = store_module.PLANNING
    store_module.PLANNING = kept if sent else {}
    try:
        yield
    finally:
        store_module.PLANNING = kept


def _timed(store: Store, settings: Settings, window: Window) -> tuple[float, float, str]:
    cpu, wall = time.process_time(), time.perf_counter()
    text = render_json(run_once(store, settings, window))
    return time.process_time() - cpu, time.perf_counter() - wall, text


def compare(store: Store, settings: Settings, window: Window, reps: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {c: {"cpu": [], "wall": []} for c in CASES}
    reports: dict[str, str] = {}
    for rep in range(reps + 1):
        for case in CASES:
            with planning(case == "sent"):
                probe = Store(store.client, store.url, query_timeout_s=store.query_timeout_s)
            cpu, wall, text = _timed(probe, settings, window)
            reports[case] = text
            if rep:  # the first of each is untimed
                samples[case]["cpu"].append(cpu)
                samples[case]["wall"].append(wall)
    if reports["sent"] != reports["not sent"]:
        raise SystemExit("benchmarks.planning: the two reports differ")
    return {
        case: {k: round(statistics.median(v), 3) for k, v in samples[case].items()}
        for case in CASES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.planning")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--directory", type=Path, default=Path("/tmp/memory-watchdog-bench"))
    args = parser.parse_args(argv)
    bench = Bench(directory=args.directory)
    store = bench.open()
    small = f"planning_{uuid.uuid4().hex[:10]}.otel_events"
    write_demo(store, small, sessions=100, seed=1, at=bench.at)
    table, _ = bench.table("joelclaw", args.events, "lean")
    for name, source in (("the demo (100 sessions)", small), (f"{args.events:,} events", table)):
        settings = settings_for(bench.url, "joelclaw", source)
        got = compare(store, settings, window_at(settings, bench.at), args.reps)
        sent, unsent = got["sent"], got["not sent"]
        print(
            f"{name}: CPU {sent['cpu']} s with the planning settings, {unsent['cpu']} s without"
            f" ({sent['cpu'] / unsent['cpu']:.2f}x); wall {sent['wall']} s, {unsent['wall']} s"
        )
    store.command(f"DROP DATABASE IF EXISTS {small.split('.')[0]}")
    bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
