"""The benchmark's results: a line per case, the tables, the machine, `benchmarks/results.json`."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.run import PATHS, USER_PATHS
from benchmarks.samples import Samples, _over_floor, _ratio, _round
from watchdog.core.times import rfc3339

if TYPE_CHECKING:
    from benchmarks.run import Bench


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
    ("mix", 6),
    ("events", 11),
    ("floor s", 8),
    ("text s", 7),
    ("text/floor", 10),
    ("json s", 7),
    ("json/floor", 10),
    ("tick s", 7),
    ("tick/floor", 10),
    ("json/text", 9),
    ("RSS MiB", 7),
)


def _cell(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _name(case: dict[str, Any]) -> str:
    if case["preset"] == "normalized":
        return f"narrow({case['from_preset']})"
    return f"{case['preset']}+state" if "state" in case else str(case["preset"])


def _median(case: dict[str, Any], path: str) -> float | None:
    return case[path].median if path in case else None


def table_rows(cases: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row of cells per case, in COLUMNS order (medians; ratios to the floor's median)."""
    rows = []
    for case in cases:
        rss = [v for v in case.get("peak_rss_mib", {}).values() if v is not None]
        rows.append(
            [
                _name(case),
                str(case["mix"]),
                f"{case['events']:,}",
                _cell(case["floor"].median),
                _cell(_median(case, "text")),
                _cell(_over_floor(case, "text")),
                _cell(_median(case, "json")),
                _cell(_over_floor(case, "json")),
                _cell(_median(case, "tick")),
                _cell(_over_floor(case, "tick")),
                _cell(_ratio(_median(case, "json"), _median(case, "text"))),
                _cell(max(rss) if rss else None, ".0f"),
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
    """Per preset and mix: each path's time at the largest size over the smallest, against events."""
    found: dict[str, Any] = {}
    kinds = sorted({(_name(c), c["mix"]) for c in cases if c["preset"] != "normalized"})
    for name, mix in kinds:
        mine = sorted(
            (c for c in cases if (_name(c), c["mix"]) == (name, mix)),
            key=lambda c: c["events"],
        )
        if len(mine) < 2:
            continue
        small, large = mine[0], mine[-1]
        found[f"{name}/{mix}"] = {
            "events": _round(large["events"] / small["events"], 1),
            **{p: _ratio(_median(large, p), _median(small, p)) for p in PATHS},
        }
    return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, Samples):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def to_json(bench: Bench, command: str, started: float) -> dict[str, Any]:
    """The results document (`benchmarks/results.json`): every sample, medians, ratios."""
    cases = []
    for case in bench.cases:
        out = _jsonable(case)
        out["over_floor"] = {p: _over_floor(case, p) for p in USER_PATHS if p in case}
        out["json_over_text"] = _ratio(_median(case, "json"), _median(case, "text"))
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
            "paths": "each a fresh process (interpreter start, store open included), medians of"
            " `repetitions`, alternating floor, text, json, tick",
            "floor": "python -m benchmarks.floor: SELECT uniqExact(session_id) over the lookback"
            " on the compiled source",
            "text": "memory-watchdog check --format text",
            "json": "memory-watchdog check --format json (adds the triage of breached checks)",
            "tick": "memory-watchdog daemon --once (evaluation, alert lifecycle, run log,"
            " triage, history, page), on a fresh state database each repetition",
            "peak_rss_mib": "per path, the highest of its repetitions",
            "in_process": "--in-process: run_once + render_json in the bench process",
            "state": "<preset>+state: the same paths with source.state (the narrow table and"
            " the session state schema apply --materialize builds), against the raw floor",
        },
        "cases": cases,
    }
