"""The session state (`source.state`) against the raw table and the floor, each in a fresh process.

The narrow table and session state are built with `schema apply --materialize`'s own statements
(the state then merged, as a table running a while is); three fresh processes then alternate
`reps` times, each timing its own work after opening the store: the floor, a run on the raw
table (`run_once` and the JSON report), and the same run with `source.state` (the narrow table
beside it read for everything but the session scans). Each reports its wall seconds, the session
query's alone and the bytes selected (ClickHouse's `SelectedBytes`; the embedded engine has no
query log); `at` falls inside a bucket, so both edges of the lookback are read from the events
(docs/performance.md#session-state-kept-at-insert-time).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import Any

from benchmarks.guard import refuse_errors
from benchmarks.run import Bench
from checks.state.layout import STATE_TABLE
from watchdog.core.times import rfc3339

# Off the bucket grid: the lookback's two ends are partial buckets, read from events.
OFFSET = timedelta(minutes=7, seconds=13)

_CHILD = """
import json, sys, time
from datetime import datetime
from checks.sources import open_source
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import open_store
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS
mode, url, source, at = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
settings = settings_from_mapping(
    {"store": {"url": url}, "source": source}, plugins=PLUGINS, env={}
)
window = window_at(settings, datetime.fromisoformat(at))
COUNTERS = "SELECT event, value FROM system.events WHERE event IN ('SelectedBytes', 'SelectedRows')"
queries = []
with open_store(url, query_timeout_s=3600) as store:
    before = dict(store.query(COUNTERS).rows)
    started = time.perf_counter()
    verdicts = checks = None
    if mode == "floor":
        src = open_source(store, settings.source)
        sql = f"SELECT uniqExact(session_id) AS sessions FROM {src.events()}"
        store.query(sql, {**src.params, **window.params()})
    else:
        timed = lambda ids, a, b: queries.append((list(ids), (b - a) / 1e9))
        report = json.loads(render_json(run_once(store, settings, window, timed=timed)))
        verdicts = {k: [c["status"], c["value"], c["sample_size"], c["evidence"]]
                    for k, c in report["checks"].items()}
        checks = {k: {"status": c["status"], "summary": c["summary"]}
                  for k, c in report["checks"].items()}
    seconds = time.perf_counter() - started
    after = dict(store.query(COUNTERS).rows)
sessions = next((s for ids, s in queries if "recall_coverage" in ids), None)
print(json.dumps({"seconds": seconds, "session_query_s": sessions, "queries": queries,
                  "selected_bytes": after.get("SelectedBytes", 0) - before.get("SelectedBytes", 0),
                  "selected_rows": after.get("SelectedRows", 0) - before.get("SelectedRows", 0),
                  "verdicts": verdicts, "checks": checks}))
"""


def _child(mode: str, url: str, source: dict[str, Any], at: datetime) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, url, json.dumps(source), rfc3339(at)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} run failed: {done.stderr.strip().splitlines()[-3:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if found["checks"] is not None:
        refuse_errors(f"{mode} run of {source.get('state') or source['table']}", found["checks"])
    found["process_s"] = time.perf_counter() - started
    return found


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def run_state(bench: Bench, preset: str, events: int) -> dict[str, Any]:
    """Floor, raw run and state run, `bench.reps` times each, alternating; medians."""
    bench.log(f"session state: {preset} at {events:,} events")
    table, _ = bench.table(preset, events)
    at = bench.at - OFFSET
    narrow, built = bench.narrow_table(preset, events, table)
    state_table = f"{narrow.database}.{STATE_TABLE}"
    store = bench.open()
    rows = store.query(f"SELECT count() AS n FROM {state_table}").first()["n"]
    sizes = dict(
        store.query(
            "SELECT concat(database, '.', table), sum(data_compressed_bytes) FROM system.parts"
            " WHERE active AND concat(database, '.', table) IN {t:Array(String)}"
            " GROUP BY database, table",
            {"t": [table, state_table]},
        ).rows
    )
    raw_source = {"preset": preset, "table": table}
    modes = {
        "floor": raw_source,
        "raw": raw_source,
        "state": {**raw_source, "state": state_table},
    }
    found: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with bench.closed():
        for _ in range(bench.reps):
            for mode, source in modes.items():
                found[mode].append(_child(mode, bench.url, source, at))
    case: dict[str, Any] = {"preset": preset, "events": events, "state_rows": int(rows)}
    case["compressed_bytes"] = {
        "raw": int(sizes.get(table, 0)),
        "state": int(sizes.get(state_table, 0)),
    }
    case["built_s"] = None if built is None else round(built, 1)
    for mode, runs in found.items():
        case[mode] = {
            "median_s": _median([r["seconds"] for r in runs]),
            "process_median_s": _median([r["process_s"] for r in runs]),
            "session_query_median_s": _median([r["session_query_s"] for r in runs]),
            "selected_bytes": runs[-1]["selected_bytes"],
            "selected_rows": runs[-1]["selected_rows"],
            "samples_s": [round(r["seconds"], 3) for r in runs],
        }
    raw_v = found["raw"][-1]["verdicts"]
    differing = {
        mode: sorted(k for k in raw_v if raw_v[k] != found[mode][-1]["verdicts"].get(k))
        for mode in ("state",)
    }
    case["same_verdicts"] = not differing["state"]
    case["differing_checks"] = differing
    floor = case["floor"]["median_s"]
    for mode in ("raw", "state"):
        case[f"{mode}_over_floor"] = round(case[mode]["median_s"] / floor, 3) if floor else None
    bench.log("  " + state_line(case))
    return case


def state_line(case: dict[str, Any]) -> str:
    """One line: the medians, the ratios, the bytes."""
    mib = 1024 * 1024
    return (
        f"floor {case['floor']['median_s']:.2f}s  raw {case['raw']['median_s']:.2f}s"
        f"  state {case['state']['median_s']:.2f}s ({case['state_over_floor']}x)"
        f"  sessions: raw {case['raw']['session_query_median_s']:.2f}s"
        f" state {case['state']['session_query_median_s']:.2f}s"
        f"  read: floor {case['floor']['selected_bytes'] / mib:.0f} MiB"
        f" raw {case['raw']['selected_bytes'] / mib:.0f} MiB"
        f" state {case['state']['selected_bytes'] / mib:.0f} MiB"
        f"  same verdicts: {case['same_verdicts']}"
    )


def render_state_table(cases: list[dict[str, Any]]) -> str:
    """The state cases as a fixed-width text table (medians; MiB selected per run)."""
    header = (
        f"{'preset':>10} {'events':>11} {'floor s':>8} {'raw s':>7} {'state s':>8}"
        f" {'state/floor':>11}"
        f" {'sess raw s':>10} {'sess state s':>12}"
        f" {'floor MiB':>9} {'raw MiB':>8} {'state MiB':>9} {'same':>5}"
    )
    lines = [header]
    mib = 1024 * 1024
    for c in cases:
        lines.append(
            f"{c['preset']:>10} {c['events']:>11,} {c['floor']['median_s']:>8.2f}"
            f" {c['raw']['median_s']:>7.2f} {c['state']['median_s']:>8.2f}"
            f" {c['state_over_floor']:>11}"
            f" {c['raw']['session_query_median_s']:>10.2f}"
            f" {c['state']['session_query_median_s']:>12.2f}"
            f" {c['floor']['selected_bytes'] / mib:>9.0f} {c['raw']['selected_bytes'] / mib:>8.0f}"
            f" {c['state']['selected_bytes'] / mib:>9.0f} {c['same_verdicts']!s:>5}"
        )
    return "\n".join(lines)
