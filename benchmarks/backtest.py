"""What a backtest costs against one scan of the data it must read (issue 26).

python -m benchmarks.backtest                     # both cases: 20M events over 8 days, 5M over 1 day
python -m benchmarks.backtest --case small        # the quick one: 5M events over 1 day
python -m benchmarks.backtest --reps 5

Each case generates (or reuses) a table of synthetic telemetry spread over
its days (benchmarks.generate), then times as fresh processes, alternating,
`reps` times each:

- the floor: `SELECT uniqExact(session_id)` over the compiled source over
  every day of the table (benchmarks.floor), the period's events plus the
  lookback of its first window: one scan of what the backtest must read;
- `memory-watchdog backtest --format text` over the last `backtest_days`
  (42 windows of 4h for 7 days, 6 for one day): every window judged, each
  scan reading the period once;
- `memory-watchdog backtest --format json`: the same, with each window's
  report as `check --format json` gives it (the triage of every breached
  check of every window: one more query per breached check and window that
  its scan did not carry);
- `memory-watchdog check --format text` at the period's end: one window,
  what an operator ran once per window before (42 of them for 7 days).

It prints the medians side by side with their ratios to the floor (and the
backtest's to one check), and writes them under `backtest` in
benchmarks/results.json. The machine is shared and noisy: quote medians and
ratios, never one sample.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.generate import generate, row_count, table_name
from benchmarks.guard import exit_code, refuse_errors
from benchmarks.run import (
    Bench,
    Samples,
    _cli_command,
    _config,
    _ratio,
    bench_arguments,
    bench_of,
    record_results,
    settings_for,
)
from watchdog.core.times import rfc3339

PATHS = ("floor", "backtest_text", "backtest_json", "check")
RESULTS = Path(__file__).with_name("results.json")


@dataclass(frozen=True)
class Case:
    """A table of `events` over `days` days, backtested over its last `backtest_days`."""

    name: str
    events: int
    days: int
    backtest_days: int
    preset: str = "joelclaw"
    mix: str = "today"


CASES = {
    "large": Case("large", 20_000_000, 8, 7),  # the target: 42 windows against 8 days' floor
    "small": Case("small", 5_000_000, 1, 1),  # quick: a day's 6 windows against one check
}


def _table(bench: Bench, case: Case) -> str:
    """The case's table, generated unless it is already there."""
    store = bench.open()
    table = table_name(case.preset, case.events, bench.seed, f"bench_days{case.days}", case.mix)
    if not bench.fresh and row_count(store, table) == case.events:
        bench.log(f"  reusing {table}")
        return table
    bench.log(f"  generating {table} ({case.events:,} events over {case.days} days) ...")
    made = generate(
        store,
        case.preset,
        table,
        case.events,
        seed=bench.seed,
        at=bench.at,
        span=timedelta(days=case.days),
        mix=case.mix,
    )
    bench.log(f"  generated in {made.seconds:.1f}s")
    return table


def _floor_config(workdir: Path, config: Path, days: int) -> Path:
    """The case's config with a lookback of every day of the table: the floor reads them all."""
    path = workdir / "floor.toml"
    path.write_text(config.read_text() + f'\n[window]\nlookback = "{days}d"\n')
    return path


def run_case(bench: Bench, case: Case) -> dict[str, Any]:
    """Time the floor, both backtests and one check, as processes, alternating."""
    bench.log(f"{case.name}: {case.events:,} events over {case.days} days")
    table = _table(bench, case)
    settings = settings_for(bench.url, case.preset, table)
    at = rfc3339(bench.at)
    start = rfc3339(bench.at - timedelta(days=case.backtest_days))
    cli, store = _cli_command(), ["--store", bench.url]
    samples = {path: Samples() for path in PATHS}
    exits: dict[str, set[int]] = {path: set() for path in PATHS}
    with tempfile.TemporaryDirectory(prefix="bench-backtest-") as name:
        workdir = Path(name)
        config = _config(workdir, settings)
        floor_config = _floor_config(workdir, config, case.days)
        common = ["--config", str(config), *store]
        period = ["--from", start, "--to", at]
        commands = {
            "floor": [sys.executable, "-m", "benchmarks.floor", bench.url, str(floor_config), at],
            "backtest_text": [*cli, "backtest", *common, *period, "--output", str(workdir / "b")],
            "backtest_json": [
                *cli,
                "backtest",
                *common,
                *period,
                "--format",
                "json",
                "--output",
                str(workdir / "b.json"),
            ],
            "check": [*cli, "check", *common, "--at", at, "--output", str(workdir / "c")],
        }
        with bench.closed():
            for _ in range(bench.reps):
                for path in PATHS:
                    measured = bench._subprocess(commands[path], workdir)
                    samples[path].seconds.append(measured["seconds"])
                    exits[path].add(int(measured["exit"]))
        document = json.loads((workdir / "b.json").read_text())
    for window in document["windows"]:
        refuse_errors(f"{table}: backtest window to {window['window']['end']}", window["checks"])
    floor = samples["floor"].median
    found = {
        "case": case.name,
        "preset": case.preset,
        "mix": case.mix,
        "events": case.events,
        "days": case.days,
        "backtest_days": case.backtest_days,
        "windows": len(document["windows"]),
        "breached_windows": sum(w["status"] != "ok" for w in document["windows"]),
        "table": table,
        "repetitions": bench.reps,
        **{path: samples[path].to_json() for path in PATHS},
        "over_floor": {p: _ratio(samples[p].median, floor) for p in PATHS if p != "floor"},
        "backtest_over_check": _ratio(samples["backtest_text"].median, samples["check"].median),
        "exits": {path: sorted(codes) for path, codes in exits.items()},
    }
    bench.log("  " + _line(found))
    return found


def _line(found: dict[str, Any]) -> str:
    parts = [f"floor {found['floor']['median_s']:.2f}s"]
    for path in PATHS[1:]:
        parts.append(f"{path} {found[path]['median_s']:.2f}s ({found['over_floor'][path]}x)")
    parts.append(f"backtest/check {found['backtest_over_check']}x")
    return "  ".join(parts)


def render(cases: list[dict[str, Any]]) -> str:
    """Medians side by side, with their ratios to the floor."""
    header = (
        "case      events   days  windows  floor      backtest text     backtest json"
        "     one check         text/check  42 checks"
    )
    lines = [header]
    for c in cases:

        def cell(path: str, c: dict[str, Any] = c) -> str:
            return f"{c[path]['median_s']:7.2f}s ({c['over_floor'][path]:.2f}x)"

        by_hand = c["windows"] * c["check"]["median_s"]
        lines.append(
            f"{c['case']:<8}{c['events'] / 1e6:>6.0f}M  {c['days']:>5}  {c['windows']:>7}"
            f"  {c['floor']['median_s']:7.2f}s  {cell('backtest_text')}  {cell('backtest_json')}"
            f"  {cell('check')}  {c['backtest_over_check']:>9.2f}x  {by_hand:7.0f}s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.backtest", description=__doc__)
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="repeatable")
    bench_arguments(parser, RESULTS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    bench = bench_of(args)
    cases = []
    try:
        for name in args.case or ["small", "large"]:
            cases.append(run_case(bench, CASES[name]))
    finally:
        bench.close()
    output = Path(args.output)
    command = " ".join(["python -m benchmarks.backtest", *(sys.argv[1:] if argv is None else argv)])
    record_results(output, "backtest", command, {"cases": cases})
    print()
    print(render(cases))
    print(f"\n{len(cases)} cases in {time.perf_counter() - started:.0f}s; results in {output}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
