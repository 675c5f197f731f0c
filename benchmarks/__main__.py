"""`python -m benchmarks`: the full matrix (`make bench`), or single cases.

Generated tables stay in the store directory (--dir) and are reused by the next run
(generation takes longer than measuring); --fresh regenerates them. What it measures:
docs/performance.md#how-the-benchmark-measures; how to pick cases: `main`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import recall_cost
from benchmarks.generate import MIXES, MIXES_OF
from benchmarks.guard import exit_code
from benchmarks.report import render_table, to_json
from benchmarks.run import Bench
from benchmarks.state import render_state_table, run_state

DEFAULT_EVENTS = (5_000_000, 20_000_000)
LARGE = 20_000_000  # from here on, --large-reps repetitions
DEFAULT_PRESETS = ("joelclaw", "otel_logs")
RESULTS = Path(__file__).with_name("results.json")
KEPT = (
    "ingest",
    "state_cases",
    "state_path_cases",
    "backtest",
)  # results of other runs, kept when not redone


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--events", type=int, action="append", help="events per case (repeatable)")
    parser.add_argument("--preset", action="append", choices=DEFAULT_PRESETS, help="repeatable")
    parser.add_argument("--mix", action="append", choices=MIXES, help="event mix (repeatable)")
    parser.add_argument(
        "--reps", type=int, default=3, help="repetitions per measurement (default 3)"
    )
    parser.add_argument(
        "--large-reps",
        type=int,
        default=1,
        help="repetitions at 20M events or more (default 1: make bench's 20-minute budget)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dir",
        default="/tmp/memory-watchdog-bench",
        help="embedded store directory, tables kept between runs (never committed)",
    )
    parser.add_argument("--fresh", action="store_true", help="regenerate tables even if present")
    parser.add_argument(
        "--generate-only",
        action="store_true",
        help="generate (or keep) the cases' tables (with --state, the narrow and state tables"
        " too) and measure nothing: a later run reuses them",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="also time run_once inside the bench process, with its transfer tally",
    )
    parser.add_argument(
        "--naive",
        action="append",
        choices=DEFAULT_PRESETS,
        help="presets the pandas script is timed on, at 1M events or fewer (default: none)",
    )
    parser.add_argument(
        "--narrow",
        choices=("auto", "yes", "no"),
        default="no",
        help="also time the narrow normalized table (auto: at 20M events; default no)",
    )
    parser.add_argument(
        "--recall-cost-only",
        action="store_true",
        help="measure only what recall_before_response costs (cases of at most 1M events),"
        " replacing that part of the results file and keeping the rest",
    )
    parser.add_argument(
        "--state",
        choices=("auto", "yes", "no"),
        default="yes",
        help="also time what users run on the session state (source.state) against the raw"
        " floor, and (at 20M events) what a run reads there (default yes)",
    )
    parser.add_argument(
        "--output", default=str(RESULTS), help="results file (default benchmarks/results.json)"
    )
    return parser.parse_args(argv)


def _mixes(args: argparse.Namespace, preset: str) -> list[str]:
    """The mixes measured for `preset`: those asked for that it has, else all it has."""
    return [m for m in (args.mix or MIXES) if m in MIXES_OF[preset]]


def _measured(choice: str, events: int) -> bool:
    """Whether an optional case (`--narrow`, `--state`: yes, no, auto) runs at `events`."""
    return choice == "yes" or (choice == "auto" and events >= LARGE)


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, or the cases the flags pick, and write `results.json`.

    The whole matrix, one case, and one measurement alone:

        python -m benchmarks                    # 5M, 20M x joelclaw, otel_logs x today, memory mix
        python -m benchmarks --events 1000000 --preset joelclaw --mix today --reps 3
        python -m benchmarks --recall-cost-only --events 1000000   # only what recall_before_response costs
    """
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    events = args.events or list(DEFAULT_EVENTS)
    presets = args.preset or list(DEFAULT_PRESETS)
    started = time.perf_counter()
    bench = Bench(
        directory=Path(args.dir),
        reps=args.reps,
        seed=args.seed,
        fresh=args.fresh,
        in_process=args.in_process,
        naive_presets=tuple(args.naive or ()),
    )
    if args.generate_only:
        try:
            for n in sorted(events):
                for preset in presets:
                    for mix in _mixes(args, preset):
                        bench.log(f"{preset} ({mix} mix) at {n:,} events")
                        table, _ = bench.table(preset, n, mix)
                        if _measured(args.state, n):
                            bench.narrow_table(preset, n, table, mix)  # and the session state
        finally:
            bench.close()
        return 0
    cost_reps = max(args.reps, recall_cost.MIN_REPS)  # a ratio near 1: noise-bound below 7
    costs = []
    state_cases: list[dict[str, Any]] = []
    try:
        for preset in presets:
            for n in sorted(events):
                bench.reps = args.reps if n < LARGE else args.large_reps
                if args.recall_cost_only:
                    continue
                for mix in _mixes(args, preset):
                    bench.run_case(preset, n, mix)
                    if _measured(args.state, n):
                        bench.run_state_case(preset, n, mix)
                if _measured(args.narrow, n) and "today" in (args.mix or MIXES):
                    bench.run_narrow(preset, n)
                if _measured(args.state, n) and n >= LARGE:
                    state_cases.append(run_state(bench, preset, n))
            # What recall_before_response costs, on a modest table (at most 1M events).
            bench.reps = cost_reps
            costs.append(recall_cost.measure(bench, preset, min(*events, recall_cost.MAX_EVENTS)))
    finally:
        bench.close()
    command = ("python -m benchmarks " + shlex.join(argv)).strip()
    output = Path(args.output)
    if args.recall_cost_only:
        document = json.loads(output.read_text()) if output.exists() else {}
    else:
        document = to_json(bench, command, started)
        if state_cases:
            document["state_cases"] = state_cases
    document[recall_cost.KEY] = {"command": command, "repetitions": cost_reps, "cases": costs}
    if output.exists():  # what this run did not measure stays: ingest, the state's cases
        earlier = json.loads(output.read_text())
        document.update({k: earlier[k] for k in KEPT if k in earlier and k not in document})
    output.write_text(json.dumps(document, indent=2) + "\n")
    print()
    if bench.cases:
        print(render_table(bench.cases))
        print()
    if state_cases:
        print("session state (fresh processes; bytes selected per run):")
        print(render_state_table(state_cases))
        print()
    if costs:
        print(f"What {recall_cost.CHECK} costs (medians of {cost_reps}):")
        print(recall_cost.render_table(costs))
        print()
    elapsed = time.perf_counter() - started
    n_cases = len(bench.cases) + len(state_cases) + len(costs)
    print(f"{n_cases} cases in {elapsed:.0f}s; results in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
