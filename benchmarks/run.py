"""Measure the watchdog against the floor of one scan, side by side, in one process run.

For each (preset, events) case: generate the table (or reuse it), then
alternate `reps` repetitions of

- the floor: `SELECT uniqExact(session_id)` over the compiled source, the
  same normalized-event subquery the checks read, over the lookback;
- the suite in-process: `run_once` plus the JSON rendering;

then (at 1M events) the naive pandas script, then, with the engine closed
(one process per store directory), the CLI `memory-watchdog check --format
json` as a subprocess. Medians are reported; every sample is kept in
`results.json`.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
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
from benchmarks.generate import DEFAULT_AT, generate, row_count, table_name
from checks.base import Window
from checks.sources import open_source
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store, open_store
from watchdog.core.times import rfc3339
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at

Log = Callable[[str], None]


@dataclass
class Samples:
    """Wall-clock seconds of repeated runs, and the CPU seconds of this process (engine included)."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "median_s": _round(self.median),
            "samples_s": [_round(s) for s in self.seconds],
        }
        if self.cpu:
            document["cpu_median_s"] = _round(self.cpu_median)
            document["cpu_samples_s"] = [_round(s) for s in self.cpu]
        return document


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def settings_for(url: str, preset: str, table: str) -> Settings:
    """Default settings reading `table` with `preset` (no config file needed)."""
    return settings_from_mapping(
        {"store": {"url": url}, "source": {"preset": preset, "table": table}}, env={}
    )


def floor_sql(store: Store, settings: Settings) -> tuple[str, dict[str, Any]]:
    """The floor query: one scan extracting the session id, on the same compiled source."""
    source = open_source(store, settings.source)
    return f"SELECT uniqExact(session_id) AS sessions FROM {source.events()}", dict(source.params)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(action: Callable[[], Any], samples: Samples | None = None) -> tuple[float, Any]:
    """Run `action`; its wall seconds (and CPU seconds, into `samples`)."""
    cpu, started = _cpu(), time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    if samples is not None:
        samples.seconds.append(seconds)
        samples.cpu.append(_cpu() - cpu)
    return seconds, result


def _peak_rss_mib() -> float:
    """The high-water RSS of this process so far (engine and Python together), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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


# Opens the store and runs the suite once, as the in-process timing does (argv: url, config, at).
_SUITE_ONLY = """
import sys
from datetime import datetime
from watchdog.core.settings import load_settings
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at
from watchdog.core.store import open_store
settings = load_settings(sys.argv[2], env={})
with open_store(sys.argv[1], query_timeout_s=3600, create=True) as store:
    render_json(run_once(store, settings, window_at(settings, datetime.fromisoformat(sys.argv[3]))))
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


@dataclass
class Bench:
    """One benchmark run: a store directory, repetitions, and the results so far."""

    directory: Path
    reps: int = 5
    seed: int = 0
    fresh: bool = False
    naive_max: int = 1_000_000
    naive_presets: tuple[str, ...] = ("joelclaw",)
    cli_max: int = 1_000_000
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

    def table(self, preset: str, events: int) -> tuple[str, dict[str, Any]]:
        """The case's table, generated unless an identical one is already there."""
        store = self.open()
        table = table_name(preset, events, self.seed)
        if not self.fresh and row_count(store, table) == events:
            self.log(f"  reusing {table} ({events:,} rows)")
            return table, {"seconds": None, "reused": True}
        self.log(f"  generating {table} ...")
        made = generate(store, preset, table, events, seed=self.seed, at=self.at)
        self.log(f"  generated {events:,} rows in {made.seconds:.1f}s")
        return table, {
            "seconds": _round(made.seconds, 1),
            "reused": False,
            "duplicates": made.duplicates,
        }

    def measure(self, settings: Settings, window: Window) -> dict[str, Any]:
        """Floor and suite, alternating, after one untimed floor; plus the suite's transfer.

        Each suite run gets a fresh `Store` over the same client, so its
        `transfer` tally holds that run alone. On the embedded engine the
        query summaries' `read_bytes` are the bytes of the result itself.
        """
        store = self.open()
        sql, params = floor_sql(store, settings)
        params = {**params, **window.params()}
        floor, suite = Samples(), Samples()
        sessions = store.query(sql, params).first()["sessions"]
        transfers = []
        document: dict[str, Any] = {}
        for _ in range(self.reps):
            _timed(lambda: store.query(sql, params), floor)
            probe = Store(store.client, store.url, query_timeout_s=store.query_timeout_s)
            _, text = _timed(lambda: render_json(run_once(probe, settings, window)), suite)  # noqa: B023
            transfers.append(probe.transfer)
            document = json.loads(text)
        transfer = transfers[0]
        return {
            "sessions": int(sessions),
            "floor": floor,
            "suite": suite,
            "report": document,
            "transfer": {
                "queries": transfer.queries,
                "result_rows": transfer.result_rows,
                "result_bytes": transfer.read_bytes,
                "same_every_run": all(
                    (t.queries, t.result_rows) == (transfer.queries, transfer.result_rows)
                    for t in transfers
                ),
            },
        }

    def measure_naive(
        self, preset: str, table: str, settings: Settings, window: Window
    ) -> dict[str, Any]:
        """The pandas script, `reps` times, and whether its values agree with the suite's."""
        store = self.open()
        samples = Samples()
        values: dict[str, Any] = {}
        for _ in range(self.reps):
            _, values = _timed(
                lambda: naive.evaluate(store.client, preset, table, settings, window), samples
            )
        return {"naive": samples, "naive_values": values}

    def _subprocess(self, command: list[str]) -> dict[str, Any]:
        """Run `command` through a small intermediate that reports its wall time and peak RSS.

        A child forked from this (large) process would inherit our RSS high-water
        mark; one forked by a fresh, small interpreter does not.
        """
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE_CHILD, *command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        measured = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        if measured is None or measured["exit"] not in (0, 1):
            raise RuntimeError(f"{command[0]} failed: {' '.join(lines[-3:])}")
        return dict(measured)

    def measure_processes(
        self, settings: Settings, window: Window, workdir: Path, cli: bool
    ) -> dict[str, Any]:
        """With the engine closed here: the suite's peak RSS alone, and the CLI `reps` times.

        The suite's RSS comes from one process that opens the store and runs
        `run_once` (what the in-process timing runs). The CLI is `memory-watchdog
        check --format json`, whose JSON report adds the triage of breached checks.
        """
        source = settings.source
        config = workdir / "watchdog.toml"
        config.write_text(f'[source]\npreset = "{source.preset}"\ntable = "{source.table}"\n')
        output = workdir / "report.json"
        at = rfc3339(window.at)
        suite_only = [sys.executable, "-c", _SUITE_ONLY, self.url, str(config), at]
        command = [*_cli_command(), "check", "--config", str(config), "--store", self.url]
        command += ["--at", at, "--format", "json", "--output", str(output)]
        found: dict[str, Any] = {}
        with self.closed():
            found["suite_peak_rss_mib"] = _round(
                self._subprocess(suite_only)["maxrss_kib"] / 1024, 1
            )
            if cli:
                samples, rss = Samples(), []
                for _ in range(self.reps):
                    measured = self._subprocess(command)
                    samples.seconds.append(measured["seconds"])
                    rss.append(measured["maxrss_kib"] / 1024)
                found.update(
                    {
                        "cli": samples,
                        "cli_peak_rss_mib": _round(max(rss), 1),
                        "cli_report": json.loads(output.read_text()),
                    }
                )
        return found

    def run_case(self, preset: str, events: int) -> dict[str, Any]:
        """Generate, then measure floor, suite, naive (small cases) and the CLI for one case."""
        self.log(f"{preset} at {events:,} events")
        table, generated = self.table(preset, events)
        settings = settings_for(self.url, preset, table)
        window = window_at(settings, self.at)
        found = self.measure(settings, window)
        case: dict[str, Any] = {
            "preset": preset,
            "events": events,
            "table": table,
            "generated": generated,
        }
        case.update(found)
        if events <= self.naive_max and preset in self.naive_presets:
            case.update(self.measure_naive(preset, table, settings, window))
            suite_values = {k: v[1] for k, v in _verdicts(found["report"]).items()}
            case["naive_agrees"] = all(
                _close(value, suite_values.get(check))
                for check, value in case["naive_values"].items()
            )
        with tempfile.TemporaryDirectory(prefix="bench-cli-") as workdir:
            case.update(
                self.measure_processes(settings, window, Path(workdir), events <= self.cli_max)
            )
        if "cli_report" in case:
            case["cli_agrees"] = _verdicts(case.pop("cli_report")) == _verdicts(found["report"])
        case["process_peak_rss_mib"] = _round(_peak_rss_mib(), 1)
        self.log("  " + summary_line(case))
        self.cases.append(case)
        return case

    def run_narrow(self, preset: str, events: int) -> dict[str, Any]:
        """The suite on the narrow normalized table built from the raw one, against the raw table.

        The table is made by `schema apply --materialize`'s own statements (table,
        view, backfill), in a database of its own; merges are off, as for the raw table.
        """
        from checks.builtin import configured_checks
        from checks.materialize import materialize_statements, plan_for

        raw = next(c for c in self.cases if c["preset"] == preset and c["events"] == events)
        store = self.open()
        raw_settings = settings_for(self.url, preset, raw["table"])
        database = f"bench_narrow_{preset}_{events}_s{self.seed}"
        plan = plan_for(raw_settings, ttl=None, database=database)
        reused = not self.fresh and row_count(store, plan.table) == events
        built = None
        if not reused:
            self.log(f"  building {plan.table} from {raw['table']} ...")
            started = time.perf_counter()
            store.command(f"DROP DATABASE IF EXISTS {database}")
            present = set(store.table_columns(raw["table"]))
            statements = materialize_statements(
                raw_settings,
                plan,
                present,
                configured_checks(raw_settings),
                since=self.at - timedelta(days=2),
                until=self.at + timedelta(days=1),
            )
            for statement in statements:
                store.command(statement.sql, statement.params)
                if statement.sql.startswith("CREATE TABLE"):
                    store.command(
                        f"ALTER TABLE {plan.table}"
                        " MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1"
                    )
            built = time.perf_counter() - started
            self.log(f"  built in {built:.1f}s")
        settings = settings_for(self.url, "normalized", plan.table)
        window = window_at(settings, self.at)
        found = self.measure(settings, window)
        with tempfile.TemporaryDirectory(prefix="bench-narrow-") as workdir:
            found.update(self.measure_processes(settings, window, Path(workdir), cli=False))
        store = self.open()  # reopened after the subprocess: the old client is closed
        sizes = store.query(
            "SELECT table, sum(data_compressed_bytes) AS bytes FROM system.parts"
            " WHERE active AND ((database = {raw_db:String} AND table = {raw_table:String})"
            " OR (database = {db:String} AND table = 'memory_events')) GROUP BY table",
            {
                "raw_db": raw["table"].split(".")[0],
                "raw_table": raw["table"].split(".")[1],
                "db": database,
            },
        ).rows
        case = {
            "preset": "normalized",
            "from_preset": preset,
            "events": events,
            "table": plan.table,
            "generated": {"seconds": _round(built, 1), "reused": reused},
            "compressed_bytes": {str(t): int(b) for t, b in sizes},
            **found,
            "agrees_with_raw": _verdicts(found["report"]) == _verdicts(raw["report"]),
            "suite_vs_raw": _ratio(found["suite"].median, raw["suite"].median),
            "process_peak_rss_mib": _round(_peak_rss_mib(), 1),
        }
        self.log("  " + summary_line(case) + f"  narrow/raw suite {case['suite_vs_raw']}")
        self.cases.append(case)
        return case


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 2)


def summary_line(case: dict[str, Any]) -> str:
    floor, suite = case["floor"].median, case["suite"].median
    return (
        f"floor {floor:.2f}s  suite {suite:.2f}s  suite/floor {_ratio(suite, floor)}"
        f"  rows->py {case['transfer']['result_rows']}"
    )


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    try:
        from importlib.metadata import version

        chdb_version = version("chdb-core")
    except Exception:
        chdb_version = "unknown"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "engine": f"chdb-core {chdb_version} (embedded ClickHouse)",
        "system": platform.platform(),
    }


COLUMNS = (
    ("preset", 17),
    ("events", 11),
    ("floor s", 8),
    ("suite s", 8),
    ("suite/floor", 11),
    ("suite CPU s", 11),
    ("CLI s", 7),
    ("naive s", 8),
    ("queries", 7),
    ("rows->py", 8),
    ("bytes->py", 9),
    ("suite RSS MiB", 13),
)


def _cell(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _name(case: dict[str, Any]) -> str:
    if case["preset"] == "normalized":
        return f"narrow({case['from_preset']})"
    return str(case["preset"])


def table_rows(cases: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row of cells per case, in COLUMNS order (medians)."""
    rows = []
    for case in cases:
        naive_s, cli_s = case.get("naive"), case.get("cli")
        rows.append(
            [
                _name(case),
                f"{case['events']:,}",
                _cell(case["floor"].median),
                _cell(case["suite"].median),
                _cell(_ratio(case["suite"].median, case["floor"].median)),
                _cell(case["suite"].cpu_median),
                _cell(cli_s.median if cli_s else None),
                _cell(naive_s.median if naive_s else None),
                str(case["transfer"]["queries"]),
                str(case["transfer"]["result_rows"]),
                f"{case['transfer']['result_bytes'] / 1024:.1f}K",
                _cell(case.get("suite_peak_rss_mib"), ".0f"),
            ]
        )
    return rows


def render_table(cases: Sequence[dict[str, Any]]) -> str:
    """The results as a fixed-width text table."""
    header = [name for name, _ in COLUMNS]
    widths = [max(w, len(n)) for n, w in COLUMNS]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    for row in table_rows(cases):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


def render_markdown(cases: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table, for docs/performance.md."""
    header = [name for name, _ in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(cases)]
    return "\n".join(lines)


def growth(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per preset: suite and floor time at the largest size over the smallest, against events."""
    found: dict[str, Any] = {}
    for preset in sorted({c["preset"] for c in cases if c["preset"] != "normalized"}):
        mine = sorted((c for c in cases if c["preset"] == preset), key=lambda c: c["events"])
        if len(mine) < 2:
            continue
        small, large = mine[0], mine[-1]
        found[preset] = {
            "events": _round(large["events"] / small["events"], 1),
            "suite": _ratio(large["suite"].median, small["suite"].median),
            "floor": _ratio(large["floor"].median, small["floor"].median),
            "rows_to_python": sorted({c["transfer"]["result_rows"] for c in mine}),
        }
    return found


def to_json(bench: Bench, command: str, started: float) -> dict[str, Any]:
    """The results document (`benchmarks/results.json`): every sample, medians, ratios."""
    cases = []
    for case in bench.cases:
        out = {k: (v.to_json() if isinstance(v, Samples) else v) for k, v in case.items()}
        out.pop("report", None)
        out["suite_over_floor"] = _ratio(case["suite"].median, case["floor"].median)
        out["statuses"] = {k: v[0] for k, v in _verdicts(case["report"]).items()}
        cases.append(out)
    return {
        "command": command,
        "machine": machine(),
        "repetitions": bench.reps,
        "evaluated_at": rfc3339(bench.at),
        "lookback": "24h",
        "total_seconds": round(time.perf_counter() - started, 1),
        "growth": growth(bench.cases),
        "notes": {
            "suite": "run_once + render_json in this process, medians of `repetitions`",
            "cli": "memory-watchdog check --format json (adds process start, store open and"
            " the triage of breached checks)",
            "result_bytes": "Store.transfer read_bytes: on the embedded engine the summary's"
            " read_bytes are the bytes of the results sent to Python",
            "suite_peak_rss_mib": "one process opening the store and running the suite once",
            "process_peak_rss_mib": "this benchmark process so far (generation and pandas included)",
        },
        "cases": cases,
    }
