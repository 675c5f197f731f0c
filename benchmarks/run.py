"""Measure what users run against the floor of one scan, side by side, in one process run.

For each (preset, mix, events) case: generate the table (or reuse it), then, with the engine
closed here (one process per store directory), alternate `reps` repetitions of four fresh
processes, the floor, `check --format text`, `check --format json` and `daemon --once` (each
tick on a fresh state database); medians are reported as ratios to the floor's, and every sample
is kept in `results.json` (docs/performance.md#how-the-benchmark-measures). With `--in-process`
the suite is also timed inside this process (`run_once` plus the JSON rendering), with its
transfer tally, and at 1M events the naive pandas script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import naive
from benchmarks.floor import floor_sql
from benchmarks.generate import DEFAULT_AT, generate, row_count, table_name
from benchmarks.guard import refuse_errors
from benchmarks.samples import (
    Samples,
    _over_floor,
    _ratio,
    _round,
    _timed,
)
from checks.base import Window
from checks.state.layout import STATE_TABLE
from checks.state.read import table_comment
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.sql import literal
from watchdog.core.store import Store, open_store
from watchdog.core.times import rfc3339
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

Log = Callable[[str], None]


def settings_for(url: str, preset: str, table: str, state: str | None = None) -> Settings:
    """Default settings reading `table` with `preset` (no config file needed), and the session
    state `state` beside it when given."""
    source = {"preset": preset, "table": table} | ({"state": state} if state else {})
    return settings_from_mapping({"store": {"url": url}, "source": source}, plugins=PLUGINS, env={})


_MEASURE_CHILD = """
import json, os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
seconds = time.perf_counter() - started
sys.stderr.write(err.decode(errors="replace"))
sys.stderr.write(json.dumps({"seconds": seconds, "maxrss_kib": usage.ru_maxrss,
                             "exit": os.waitstatus_to_exitcode(status)}) + "\\n")
"""


def _cli_command() -> list[str]:
    script = Path(sys.executable).with_name("memory-watchdog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "watchdog"]


def _verdicts(document: dict[str, Any]) -> dict[str, tuple[str, Any, int]]:
    """(status, value, sample_size) per check: what two runs must agree on."""
    return {
        check_id: (c["status"], c["value"], c["sample_size"])
        for check_id, c in document["checks"].items()
    }


PATHS = ("floor", "text", "json", "tick")
USER_PATHS = PATHS[1:]


def _config(workdir: Path, settings: Settings, database: str | None = None) -> Path:
    """A config file reading the case's table (and its session state when it has one); the
    tick's own state database, when given."""
    source = settings.source
    state = f'state = "{source.state}"\n' if source.state else ""
    lines = [f'[source]\npreset = "{source.preset}"\ntable = "{source.table}"\n{state}']
    lines.append(f'[report]\ndir = "{workdir / "reports"}"\n')
    lines.append('[schedule]\ndelay = "0s"\n')  # the tick at `at` judges the window ending at `at`
    if database:
        lines.append(f'[store]\ndatabase = "{database}"\n')
    stem = database or ("state" if source.state else "watchdog")
    path = workdir / f"{stem}.toml"
    path.write_text("\n".join(lines))
    return path


def _report(workdir: Path, rep: int) -> Path:
    """Where repetition `rep` of `check --format json` writes its report."""
    return workdir / f"r{rep}.json"


def _tick_database(settings: Settings, rep: int) -> str:
    """The state database of one repetition's tick: a fresh install each time."""
    return f"bench_tick_{str(settings.source.table).replace('.', '_')}_{rep}"


@dataclass
class Bench:
    """One benchmark run: a store directory, repetitions, and the results so far."""

    directory: Path
    reps: int = 3
    seed: int = 0
    fresh: bool = False
    naive_max: int = 1_000_000
    naive_presets: tuple[str, ...] = ()
    in_process: bool = False
    log: Log = print
    at: datetime = DEFAULT_AT
    cases: list[dict[str, Any]] = field(default_factory=list)
    _store_cm: Any = None
    store: Store | None = None

    @property
    def url(self) -> str:
        return f"chdb://{self.directory}"

    # The engine: one directory per process, so the CLI runs only while it is closed.
    def open(self) -> Store:
        if self.store is None:
            self._store_cm = open_store(self.url, query_timeout_s=3600, create=True)
            self.store = self._store_cm.__enter__()
        return self.store

    def close(self) -> None:
        if self._store_cm is not None:
            self._store_cm.__exit__(None, None, None)
        self._store_cm, self.store = None, None

    @contextmanager
    def closed(self) -> Iterator[None]:
        self.close()
        try:
            yield
        finally:
            self.open()

    def table(self, preset: str, events: int, mix: str = "today") -> tuple[str, dict[str, Any]]:
        """The case's table, generated unless an identical one is already there."""
        store = self.open()
        table = table_name(preset, events, self.seed, mix=mix)
        if not self.fresh and row_count(store, table) == events:
            self.log(f"  reusing {table} ({events:,} rows)")
            return table, {"seconds": None, "reused": True}
        self.log(f"  generating {table} ...")
        made = generate(store, preset, table, events, seed=self.seed, at=self.at, mix=mix)
        self.log(f"  generated {events:,} rows in {made.seconds:.1f}s")
        return table, {
            "seconds": _round(made.seconds, 1),
            "reused": False,
            "duplicates": made.duplicates,
        }

    def measure(self, settings: Settings, window: Window) -> dict[str, Any]:
        """In this process: floor and suite, alternating, after one untimed floor; the transfer.

        Each suite run gets a fresh `Store` over the same client, so its
        `transfer` tally holds that run alone. On the embedded engine the
        query summaries' `read_bytes` are the bytes of the result itself.
        """
        store = self.open()
        sql, params = floor_sql(store, settings)
        params = {**params, **window.params()}
        floor, suite = Samples(), Samples()
        store.query(sql, params)
        transfers = []
        document: dict[str, Any] = {}
        for _ in range(self.reps):
            _timed(lambda: store.query(sql, params), floor)
            probe = Store(store.client, store.url, query_timeout_s=store.query_timeout_s)
            _, text = _timed(lambda: render_json(run_once(probe, settings, window)), suite)  # noqa: B023
            transfers.append(probe.transfer)
            document = json.loads(text)
            refuse_errors(
                f"{settings.source.display_name}: run_once in process", document["checks"]
            )
        transfer = transfers[0]
        return {
            "in_process": {
                "floor": floor,
                "suite": suite,
                "suite_over_floor": _ratio(suite.median, floor.median),
                "statuses": {k: v[0] for k, v in _verdicts(document).items()},
                "transfer": {
                    "queries": transfer.queries,
                    "result_rows": transfer.result_rows,
                    "result_bytes": transfer.read_bytes,
                    "same_every_run": all(
                        (t.queries, t.result_rows) == (transfer.queries, transfer.result_rows)
                        for t in transfers
                    ),
                },
            },
        }

    def measure_naive(
        self, preset: str, table: str, settings: Settings, window: Window
    ) -> dict[str, Any]:
        """The pandas script, `reps` times."""
        store = self.open()
        samples = Samples()
        values: dict[str, Any] = {}
        for _ in range(self.reps):
            _, values = _timed(
                lambda: naive.evaluate(store.client, preset, table, settings, window), samples
            )
        return {"naive": samples, "naive_values": values}

    def _subprocess(self, command: list[str], cwd: Path) -> dict[str, Any]:
        """Run `command` through a small intermediate that reports its wall time and peak RSS.

        A child forked from this (large) process would inherit our RSS high-water
        mark; one forked by a fresh, small interpreter does not.
        """
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE_CHILD, *command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
            cwd=cwd,
        )
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        measured = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        # exit 1 too: a breach, or an internal error (a traceback only with --debug)
        crashed = any(line.startswith("Traceback") or "internal error" in line for line in lines)
        if measured is None or measured["exit"] not in (0, 1) or crashed:
            raise RuntimeError(f"{command[:4]} failed: {' '.join(lines[-3:])}")
        return dict(measured)

    def commands(
        self, settings: Settings, window: Window, workdir: Path, floor: Settings | None = None
    ) -> dict[str, Callable[[int], list[str]]]:
        """Each path's command line, by repetition (a tick gets a fresh state database).

        The floor reads `floor` when given (the raw table beside a session state)."""
        config = _config(workdir, settings)
        floor_config = _config(workdir, floor) if floor is not None else config
        at = rfc3339(window.at)
        cli, store = _cli_command(), ["--store", self.url]
        check = [*cli, "check", "--config", str(config), *store, "--at", at]

        def tick(rep: int) -> list[str]:
            own = _config(workdir, settings, database=_tick_database(settings, rep))
            return [*cli, "daemon", "--once", "--config", str(own), *store, "--at", at]

        floor_command = [sys.executable, "-m", "benchmarks.floor", self.url, str(floor_config), at]
        return {
            "floor": lambda _: floor_command,
            "text": lambda _: [*check, "--format", "text", "--output", str(workdir / "r.txt")],
            "json": lambda rep: [
                *check,
                "--format",
                "json",
                "--output",
                str(_report(workdir, rep)),
            ],
            "tick": tick,
        }

    def measure_paths(
        self,
        settings: Settings,
        window: Window,
        workdir: Path,
        paths: Sequence[str] = PATHS,
        floor: Settings | None = None,
    ) -> dict[str, Any]:
        """With the engine closed here: each path as a fresh process, `reps` times, alternating.

        Returns per path its Samples, peak RSS and exit codes, and the JSON
        report's statuses (the paths must agree on the verdict: their exit codes).
        """
        commands = self.commands(settings, window, workdir, floor)
        samples = {path: Samples() for path in paths}
        rss: dict[str, float] = {}
        exits: dict[str, set[int]] = {path: set() for path in paths}
        with self.closed():
            for rep in range(self.reps):
                for path in paths:
                    measured = self._subprocess(commands[path](rep), workdir)
                    samples[path].seconds.append(measured["seconds"])
                    rss[path] = max(rss.get(path, 0.0), measured["maxrss_kib"] / 1024)
                    exits[path].add(int(measured["exit"]))
        if "tick" in paths:
            for rep in range(self.reps):
                self.open().command(f"DROP DATABASE IF EXISTS {_tick_database(settings, rep)}")
        statuses = {}
        where = f"{settings.source.display_name}: check --format json"
        where += " on the session state" if settings.source.state else ""
        for rep in range(self.reps) if "json" in paths else ():
            document = json.loads(_report(workdir, rep).read_text())
            refuse_errors(f"{where} (repetition {rep + 1})", document["checks"])
            statuses = {k: v[0] for k, v in _verdicts(document).items()}
        user_exits = {e for path in paths if path != "floor" for e in exits[path]}
        return {
            **samples,
            "peak_rss_mib": {path: _round(mib, 1) for path, mib in rss.items()},
            "exits": {path: sorted(codes) for path, codes in exits.items()},
            "paths_agree": len(user_exits) <= 1,
            "statuses": statuses,
        }

    def run_case(self, preset: str, events: int, mix: str = "today") -> dict[str, Any]:
        """Generate (or reuse), then time the floor and the user paths as processes."""
        self.log(f"{preset} ({mix} mix) at {events:,} events")
        table, generated = self.table(preset, events, mix)
        settings = settings_for(self.url, preset, table)
        window = window_at(settings, self.at)
        case: dict[str, Any] = {
            "preset": preset,
            "mix": mix,
            "events": events,
            "table": table,
            "generated": generated,
            "repetitions": self.reps,
        }
        if self.in_process:
            case.update(self.measure(settings, window))
        if events <= self.naive_max and preset in self.naive_presets:
            case.update(self.measure_naive(preset, table, settings, window))
        with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
            case.update(self.measure_paths(settings, window, Path(workdir)))
        self.log("  " + summary_line(case))
        self.cases.append(case)
        return case

    def narrow_table(
        self, preset: str, events: int, raw_table: str, mix: str = "today", days: int = 2
    ) -> tuple[Any, float | None]:
        """The narrow normalized table of `raw_table` and the session state (built unless there).

        Made by `schema apply --materialize`'s own statements (tables, views,
        backfills of the `days` before `at`), in a database of its own; merges are off, as for the raw
        table. Returns the plan and the seconds it took to build (None: kept).
        """
        from checks.builtin import configured_checks
        from checks.materialize import materialize_statements, plan_for

        store = self.open()
        raw_settings = settings_for(self.url, preset, raw_table)
        infix = "" if mix == "today" else f"_{mix}"
        database = f"bench_narrow_{preset}{infix}_{events}_s{self.seed}"
        plan = plan_for(raw_settings, ttl=None, database=database)
        present = store.table_columns(raw_table)
        statements = materialize_statements(
            raw_settings,
            plan,
            present,
            configured_checks(raw_settings),
            since=self.at - timedelta(days=days),
            until=self.at + timedelta(days=1),
        )
        # Kept when built by these very statements: the state's COMMENT records its layout.
        comment = table_comment(store, f"{database}.{STATE_TABLE}") or ""
        wanted = next(s.sql for s in statements if f"{STATE_TABLE}\n(" in s.sql)
        kept = bool(comment) and f"COMMENT {literal(comment)}" in wanted
        if not self.fresh and row_count(store, plan.table) == events and kept:
            return plan, None
        self.log(f"  building {plan.table} from {raw_table} ...")
        started = time.perf_counter()
        store.command(f"DROP DATABASE IF EXISTS {database}")
        for statement in statements:
            store.command(statement.sql, statement.params)
            if statement.sql.startswith(f"CREATE TABLE IF NOT EXISTS {plan.table}\n"):
                store.command(
                    f"ALTER TABLE {plan.table}"
                    " MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1"
                )
        # The state merged, as a table running a while is (benchmarks.state reads it).
        store.command(f"OPTIMIZE TABLE {database}.{STATE_TABLE} FINAL")
        built = time.perf_counter() - started
        self.log(f"  built in {built:.1f}s")
        return plan, built

    def run_state_case(self, preset: str, events: int, mix: str = "today") -> dict[str, Any]:
        """What users run with `source.state` (the large-deployment setup), as processes,
        against the floor of the raw table: the narrow table and the state built first."""
        self.log(f"{preset} ({mix} mix) at {events:,} events, on the session state")
        table, _ = self.table(preset, events, mix)
        plan, built = self.narrow_table(preset, events, table, mix)
        raw = settings_for(self.url, preset, table)
        state = settings_for(self.url, preset, table, f"{plan.database}.{STATE_TABLE}")
        window = window_at(raw, self.at)
        with tempfile.TemporaryDirectory(prefix="bench-state-") as workdir:
            found = self.measure_paths(state, window, Path(workdir), floor=raw)
        case: dict[str, Any] = {
            "preset": preset,
            "mix": mix,
            "events": events,
            "table": table,
            "state": f"{plan.database}.{STATE_TABLE}",
            "generated": {"seconds": _round(built, 1), "reused": built is None},
            "repetitions": self.reps,
            **found,
        }
        raw_case = next(
            (
                c
                for c in self.cases
                if (c["preset"], c["events"], c["mix"]) == (preset, events, mix)
                and "state" not in c
            ),
            None,
        )
        if raw_case is not None:
            case["agrees_with_raw"] = found["statuses"] == raw_case["statuses"]
        self.log("  " + summary_line(case))
        self.cases.append(case)
        return case

    def run_narrow(self, preset: str, events: int) -> dict[str, Any]:
        """The floor and `check --format json` on the narrow normalized table built from the raw one."""
        raw = next(
            c
            for c in self.cases
            if (c["preset"], c["events"], c["mix"]) == (preset, events, "today")
        )
        plan, built = self.narrow_table(preset, events, raw["table"])
        reused = built is None
        settings = settings_for(self.url, "normalized", plan.table)
        window = window_at(settings, self.at)
        with tempfile.TemporaryDirectory(prefix="bench-narrow-") as workdir:
            found = self.measure_paths(settings, window, Path(workdir), ("floor", "json"))
        case = {
            "preset": "normalized",
            "from_preset": preset,
            "mix": "today",
            "events": events,
            "table": plan.table,
            "generated": {"seconds": _round(built, 1), "reused": reused},
            **found,
            "agrees_with_raw": found["statuses"] == raw["statuses"],
            "json_vs_raw": _ratio(found["json"].median, raw["json"].median),
        }
        self.log("  " + summary_line(case) + f"  narrow/raw json {case['json_vs_raw']}")
        self.cases.append(case)
        return case


def summary_line(case: dict[str, Any]) -> str:
    parts = [f"floor {case['floor'].median:.2f}s"]
    for path in USER_PATHS:
        if path in case:
            parts.append(f"{path} {case[path].median:.2f}s ({_over_floor(case, path)}x)")
    return "  ".join(parts)


def bench_arguments(parser: argparse.ArgumentParser, results: Path) -> None:
    """The flags every side benchmark takes: repetitions, seed, store directory, fresh tables,
    and the results file."""
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default="/tmp/memory-watchdog-bench")
    parser.add_argument("--fresh", action="store_true", help="regenerate the tables")
    parser.add_argument("--output", default=str(results))


def bench_of(args: argparse.Namespace) -> Bench:
    """The Bench those flags name, judging at the tables' fixed time."""
    bench = Bench(directory=Path(args.dir), reps=args.reps, seed=args.seed, fresh=args.fresh)
    bench.at = DEFAULT_AT
    return bench


def record_results(output: Path, key: str, command: str, found: dict[str, Any]) -> None:
    """Write `found` under `key` of the results document `output` (the other keys kept), with
    the command that measured it."""
    document = json.loads(output.read_text()) if output.exists() else {}
    document[key] = {"command": command.strip(), **found}
    output.write_text(json.dumps(document, indent=2) + "\n")
