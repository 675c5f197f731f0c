"""What `recall_before_response` costs: the session query and the suite with and without it.

On one table, alternating `reps` times: the session query of the enabled built-in checks built
with and without the check (the same plan, `checks.scans.session`), and the whole suite
(`run_once` plus the JSON rendering) with the check enabled and with
`[checks.recall_before_response] enabled = false`. Medians and their ratios are reported, and
whether the other checks' verdicts are the same either way (they must be: the check only adds
columns); the generated tables carry human messages and responses, so the check judges real
obligations (docs/performance.md#what-recall_before_response-costs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from benchmarks.guard import refuse_errors
from benchmarks.run import Bench, _verdicts, settings_for
from benchmarks.samples import Samples, _ratio, _timed
from checks.builtin import configured_checks
from checks.kinds import kind_of
from checks.scans.plans import Plans
from checks.sources import open_source
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.report.text import render_json
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

CHECK = "recall_before_response"
KEY = "recall_before_response_cost"  # its part of benchmarks/results.json
MAX_EVENTS = 1_000_000  # a modest case: the machine is shared
MIN_REPS = 7  # the ratio is near 1: three repetitions are noise-bound
PARTS = ("query_with", "query_without", "suite_with", "suite_without")


def without_check(url: str, preset: str, table: str) -> Settings:
    """The default settings for `table`, with recall_before_response disabled."""
    return settings_from_mapping(
        {
            "store": {"url": url},
            "source": {"preset": preset, "table": table},
            "checks": {CHECK: {"enabled": False}},
        },
        plugins=PLUGINS,
        env={},
    )


def session_queries(
    store: Store, settings: Settings, at_params: dict[str, Any]
) -> dict[str, tuple[str, dict[str, Any]]]:
    """The shared session query (SQL, parameters) with and without the check."""
    source = open_source(store, settings.source)
    enabled = [s for s in configured_checks(settings) if s.enabled]
    found = {}
    for label, specs in (
        ("with", enabled),
        ("without", [s for s in enabled if s.id != CHECK]),
    ):
        plans = Plans(source)
        for spec in specs:
            kind_of(spec).plan(plans, spec)
        scan = plans.sessions[None]  # the session scan of the configured window
        found[label] = (scan.render_raw(source), {**source.params, **at_params, **scan.params()})
    return found


def measure(bench: Bench, preset: str, events: int) -> dict[str, Any]:
    """The side-by-side medians on the (reused or generated) table of `preset` x `events`."""
    bench.log(f"{CHECK} cost: {preset} at {events:,} events")
    table, _ = bench.table(preset, events)
    store = bench.open()
    with_settings = settings_for(bench.url, preset, table)
    without_settings = without_check(bench.url, preset, table)
    window = window_at(with_settings, bench.at)
    queries = session_queries(store, with_settings, window.params())
    samples = {part: Samples() for part in PARTS}
    store.aggregate(*queries["with"])  # one untimed run: caches warm for both
    reports: dict[str, Any] = {}
    for rep in range(bench.reps):
        # Alternate which goes first, so neither always runs on the other's warm cache.
        order = ("with", "without") if rep % 2 == 0 else ("without", "with")
        for label in order:
            sql, params = queries[label]
            _timed(lambda: store.aggregate(sql, params), samples[f"query_{label}"])  # noqa: B023
        for label in order:
            settings = with_settings if label == "with" else without_settings
            _, text = _timed(
                lambda: render_json(run_once(store, settings, window)),  # noqa: B023
                samples[f"suite_{label}"],
            )
            refuse_errors(f"{table}: the suite {label} {CHECK}", _json(text)["checks"])
            reports[label] = text
    verdicts = {label: _verdicts(_json(text)) for label, text in reports.items()}
    verdicts["with"].pop(CHECK)
    verdicts["without"].pop(CHECK)
    judged = _json(reports["with"])["checks"][CHECK]
    cost = {
        "preset": preset,
        "events": events,
        "table": table,
        **{part: samples[part].to_json() for part in PARTS},
        "query_ratio": _ratio(samples["query_with"].median, samples["query_without"].median),
        "suite_ratio": _ratio(samples["suite_with"].median, samples["suite_without"].median),
        # CPU seconds of this process (engine threads included): steadier than wall time
        # on a shared machine.
        "query_cpu_ratio": _ratio(
            samples["query_with"].cpu_median, samples["query_without"].cpu_median
        ),
        "suite_cpu_ratio": _ratio(
            samples["suite_with"].cpu_median, samples["suite_without"].cpu_median
        ),
        "sql_chars": {label: len(sql) for label, (sql, _) in queries.items()},
        "check": {
            "status": judged["status"],
            "value": judged["value"],
            "sample_size": judged["sample_size"],
        },
        "other_verdicts_agree": verdicts["with"] == verdicts["without"],
    }
    bench.log("  " + cost_line(cost))
    return cost


def _json(text: str) -> dict[str, Any]:
    return dict(json.loads(text))


def _median(cost: dict[str, Any], part: str) -> float:
    return float(cost[part]["median_s"])


def cost_line(cost: dict[str, Any]) -> str:
    """One line: both medians and the ratio, for the session query and the suite."""
    return (
        f"session query {_median(cost, 'query_without'):.3f}s -> {_median(cost, 'query_with'):.3f}s"
        f" (x{cost['query_ratio']}), suite {_median(cost, 'suite_without'):.3f}s ->"
        f" {_median(cost, 'suite_with'):.3f}s (x{cost['suite_ratio']}); CPU x{cost['query_cpu_ratio']}"
        f" and x{cost['suite_cpu_ratio']};"
        f" other verdicts agree: {cost['other_verdicts_agree']}"
    )


COLUMNS = (
    "preset",
    "events",
    "messages judged",
    "session query without s",
    "with s",
    "ratio",
    "suite without s",
    "with s",
    "ratio",
    "query CPU ratio",
    "suite CPU ratio",
)


def rows(costs: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row of cells per measured case (medians)."""
    return [
        [
            c["preset"],
            f"{c['events']:,}",
            f"{c['check']['sample_size']:,}",
            f"{_median(c, 'query_without'):.3f}",
            f"{_median(c, 'query_with'):.3f}",
            f"{c['query_ratio']:.2f}",
            f"{_median(c, 'suite_without'):.3f}",
            f"{_median(c, 'suite_with'):.3f}",
            f"{c['suite_ratio']:.2f}",
            f"{c['query_cpu_ratio']:.2f}",
            f"{c['suite_cpu_ratio']:.2f}",
        ]
        for c in costs
    ]


def render_table(costs: Sequence[dict[str, Any]]) -> str:
    """The costs as a fixed-width text table."""
    table = [list(COLUMNS), *rows(costs)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in table
    )


def render_markdown(costs: Sequence[dict[str, Any]]) -> str:
    """The costs as a Markdown table, for docs/performance.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(costs)]
    return "\n".join(lines)
