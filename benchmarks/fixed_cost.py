"""`python -m benchmarks.fixed_cost`: what a check process costs before it reads an event.

E.g. `python -m benchmarks.fixed_cost --events 20000000 --mix lean --reps 5`: on the benchmark's
table of that size (generated, with its narrow table and session state, unless there), four
fresh processes alternating, `reps` times: the floor on the raw table, `check --format json` on
the session state, `check --format json` on an empty table of the same layout in the same store,
and a process that opens the store and runs `SELECT 1`; medians, each as a ratio to the floor's
(docs/performance.md#what-a-check-process-on-the-state-costs-and-what-it-costs-to-read-nothing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.generate import DEFAULT_AT, MIXES
from benchmarks.guard import exit_code
from benchmarks.run import Bench, _cli_command, _config, settings_for
from checks.source_ddl import create_table_sql
from checks.state.layout import STATE_TABLE
from watchdog.core.times import rfc3339

PROCESSES = ("floor", "state", "empty", "open")


def measure(bench: Bench, preset: str, events: int, mix: str) -> dict[str, list[float]]:
    """Each process's wall seconds, by name, alternating."""
    table, _ = bench.table(preset, events, mix)
    plan, _ = bench.narrow_table(preset, events, table, mix)
    empty = f"{table}_empty"
    store = bench.open()
    store.command(f"DROP TABLE IF EXISTS {empty}")
    store.command(create_table_sql(preset, empty, ttl=False))
    raw = settings_for(bench.url, preset, table)
    state = settings_for(bench.url, preset, table, f"{plan.database}.{STATE_TABLE}")
    at = rfc3339(bench.at)
    seconds: dict[str, list[float]] = {name: [] for name in PROCESSES}
    with tempfile.TemporaryDirectory(prefix="bench-fixed-") as directory:
        workdir = Path(directory)
        (workdir / "empty").mkdir()
        check = [*_cli_command(), "check", "--store", bench.url, "--at", at, "--format", "json"]
        opened = (
            "from watchdog.core.store import open_store\n"
            f"with open_store({bench.url!r}) as store: store.query('SELECT 1')\n"
        )
        commands = {
            "floor": [
                sys.executable,
                "-m",
                "benchmarks.floor",
                bench.url,
                str(_config(workdir, raw)),
                at,
            ],
            "state": [*check, "--config", str(_config(workdir, state))],
            "empty": [
                *check,
                "--config",
                str(_config(workdir / "empty", settings_for(bench.url, preset, empty))),
            ],
            "open": [sys.executable, "-c", opened],
        }
        with bench.closed():
            for _ in range(bench.reps):
                for name in PROCESSES:
                    seconds[name].append(bench._subprocess(commands[name], workdir)["seconds"])
    bench.open().command(f"DROP TABLE IF EXISTS {empty}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fixed_cost", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000_000)
    parser.add_argument("--preset", choices=("joelclaw", "otel_logs"), default="joelclaw")
    parser.add_argument("--mix", choices=MIXES, default="lean")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/memory-watchdog-bench")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bench = Bench(directory=Path(args.dir), reps=args.reps)
    bench.at = DEFAULT_AT
    try:
        seconds = measure(bench, args.preset, args.events, args.mix)
    finally:
        bench.close()
    floor = statistics.median(seconds["floor"])
    print(f"{args.preset} ({args.mix} mix) at {args.events:,} events, medians of {args.reps}:")
    for name, samples in seconds.items():
        median = statistics.median(samples)
        shown = ", ".join(f"{s:.2f}" for s in samples)
        print(f"  {median:7.2f} s  {median / floor:5.2f}x floor  {name}  ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
