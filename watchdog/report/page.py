"""The triage page: one self-contained HTML report per evaluation.

`render_page` turns a Report (with its triage breakdown) and its History (watchdog.report.history)
into one HTML document: inline CSS and SVG, no script, nothing fetched, so it renders offline
and prints cleanly; watchdog.report.files writes it. Jinja2 autoescapes every value from the
data; error text appears only as normalised classes (checks.triage), and payload values never
do (docs/operations.md#the-triage-page).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from alerts.lifecycle import Rules
from checks.base import CheckResult, Report, Status
from checks.breakdown import Triage
from checks.builtin import configured_checks
from checks.kinds import describe_check
from checks.verdict import format_target, format_value, percent
from watchdog.core.durations import format_duration
from watchdog.core.settings import Settings, command_flags
from watchdog.core.store import Store, open_configured
from watchdog.core.times import rfc3339
from watchdog.report.charts import (
    BREACHING,
    Point,
    has_trend,
    sparkline,
    timeline_chart,
    value_chart,
    window_span,
)
from watchdog.report.explain import explain_command
from watchdog.report.history import AlertReplay, History, episodes, load_history, replay_alerts
from watchdog.report.slo_page import SloView, report_views, slo_tiles, slo_views
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import default_settings
from watchdog.runner.slo import judge_before_run

ICON = {
    Status.OK: "✓",
    Status.BREACHED: "✗",
    Status.ERROR: "⚠",
    Status.INSUFFICIENT_DATA: "◐",
    Status.NO_DATA: "∅",
    Status.DISABLED: "–",
}
WORD = {
    Status.OK: "OK",
    Status.BREACHED: "Breached",
    Status.ERROR: "Error",
    Status.INSUFFICIENT_DATA: "Insufficient data",
    Status.NO_DATA: "No data",
    Status.DISABLED: "Disabled",
}


# --- the page -------------------------------------------------------------------------------


@functools.cache
def environment() -> Environment:
    """The pages' templates (this page's and the backtest's), values from the data escaped."""
    found = Environment(
        loader=PackageLoader("watchdog.report", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    found.filters["rfc3339"] = rfc3339
    found.filters["duration"] = format_duration
    return found


def _since(result: CheckResult, replay: AlertReplay, length: timedelta) -> str:
    """A breaching tile's current breach: "new in this window" or "since <start> · N windows"."""
    if result.status not in BREACHING or replay.breaching_since is None:
        return ""
    if replay.breaching == 1:
        return "new in this window"
    start = (replay.breaching_since - length).strftime("%m-%d %H:%M")
    return f"since {start} UTC · {replay.breaching} windows"


def _tile(result: CheckResult, series: Sequence[Point] = (), since: str = "") -> dict[str, Any]:
    return {
        "since": since,
        "spark": sparkline(
            series, target=result.target, unit=result.unit, title=f"{result.id} history"
        )
        if has_trend(series) and result.status is not Status.DISABLED
        else None,
        "id": result.id,
        "status": result.status.value,
        "icon": ICON[result.status],
        "word": WORD[result.status],
        "value": format_value(result, result.value),
        "target": format_target(result),
        "severity": result.severity.value,
        "sample_size": result.sample_size,
        "summary": result.summary,
        "description": result.description,
        "breaching": result.status in BREACHING,
    }


def _deviation_table(report: Report, tipos: Sequence[str]) -> dict[str, Any]:
    """The conforming deviation events as an agente x tipo table with totals."""
    columns = list(dict.fromkeys([*tipos, *(d.tipo for d in report.deviations)]))
    agentes = sorted({d.agente for d in report.deviations})
    cells = {(d.agente, d.tipo): d.count for d in report.deviations}
    rows = [
        {
            "agente": agente,
            "counts": [cells.get((agente, tipo), 0) for tipo in columns],
            "total": sum(cells.get((agente, tipo), 0) for tipo in columns),
        }
        for agente in agentes
    ]
    totals = [sum(cells.get((a, tipo), 0) for a in agentes) for tipo in columns]
    return {"columns": columns, "rows": rows, "totals": totals, "total": sum(totals)}


def _triage(found: Triage | None) -> dict[str, Any] | None:
    """The triage breakdown of one check, shares as percentages for the page."""
    if found is None:
        return None
    groups = [
        (
            dimension.name,
            [
                {
                    "value": g.value or "(empty)",
                    "count": g.count,
                    "share": percent(g.share),
                    "width": round(g.share * 100, 1),
                }
                for g in dimension.groups
            ],
        )
        for dimension in found.dimensions
    ]
    return {
        "total": found.items,
        "noun": found.noun,
        "groups": groups,
        "sessions": found.sessions or (),
        "error": found.error,
    }


def reproduce_command(report: Report, settings: Settings | None = None) -> str:
    """The exact `memory-watchdog check` that evaluates this window again: with the config file
    the run read and its store (`command_flags`; the default store too).

    The store URL is shown with its password masked (`***`): whoever reruns it
    puts the password back, or sets WATCHDOG_STORE_URL instead.
    """
    command = (
        f"memory-watchdog check --at {rfc3339(report.window.at)}"
        f" --window {format_duration(report.window.length)}"
    )
    flags = command_flags(settings) if settings is not None else ""
    return f"{command} {flags}" if flags else command


def _details(report: Report, settings: Settings) -> list[dict[str, Any]]:
    """What broke: each breached or errored check's parameters, evidence and triage."""
    specs = {spec.id: spec for spec in configured_checks(settings)}
    return [
        {
            "tile": _tile(r),
            "parameters": describe_check(specs[r.id]) if r.id in specs else [],
            "evidence": r.evidence.shown(),
            "triage": _triage(report.triage.get(r.id)),
            "explain": (
                explain_command(
                    listed[0], report.window.at, command_flags(settings), report.window.length
                )
                if (
                    listed := r.evidence.sessions
                    or (r.evidence.events if r.evidence.details else None)
                )
                else ""
            ),
        }
        for r in report.ordered()
        if r.status in BREACHING
    ]


def _charts(report: Report, history: History) -> list[dict[str, Any]]:
    """Each enabled check's value over its recent windows."""
    charts = []
    for r in report.ordered():
        if r.status is Status.DISABLED:
            continue
        points = history.points.get(r.id, ())
        title = f"{r.id} over the last {len(points)} windows"
        charts.append(
            {
                "id": r.id,
                "status": r.status.value,
                "icon": ICON[r.status],
                "word": WORD[r.status],
                "svg": value_chart(points, target=r.target, unit=r.unit, title=title),
                "unit": r.unit,
            }
        )
    return charts


def _alerts(report: Report, history: History, replays: Mapping[str, AlertReplay]) -> dict[str, Any]:
    """The alert timeline: the episodes the lifecycle fired over the recorded runs."""
    found = episodes(replays)
    all_points = [p for series in history.points.values() for p in series]
    start = window_span(all_points, report.window.end, report.window.length)
    note = (
        ""
        if history.holds_run(report)
        else "This evaluation is not in the run log (no alert pipeline ran on it):"
        " it is charted, but fires no alert here."
    )
    return {
        "timeline": timeline_chart(
            found, start=start, end=report.window.end, title="Alert timeline"
        ),
        "episodes": [
            {
                "check": e.name,
                "fired_at": rfc3339(e.fired_at),
                "resolved_at": rfc3339(e.resolved_at) if e.resolved_at else None,
            }
            for e in found
        ],
        "alerts_note": note,
    }


def render_page(
    report: Report,
    history: History | None = None,
    *,
    settings: Settings | None = None,
    generated_at: datetime | None = None,
    slos: Sequence[SloView] | None = None,
) -> str:
    """The report as one self-contained HTML document, with an error budget section for its
    SLOs (`slos`: with the buckets of their periods, read by `slo_views`; None: the report's
    own, drawn without a burndown)."""
    settings = settings or default_settings()
    history = (history or History(windows=settings.report.history)).with_report(report)
    replays = replay_alerts(history, report, Rules.of(settings.alerts, configured_checks(settings)))
    ordered = report.ordered()
    length = report.window.length
    context = {
        "report": report,
        "status": report.status.value,
        "status_icon": ICON[report.status],
        "status_word": WORD[report.status],
        "window_start": rfc3339(report.window.start),
        "window_end": rfc3339(report.window.end),
        "window_length": format_duration(length),
        "lookback": format_duration(report.window.lookback),
        "evaluated_at": rfc3339(report.window.at),
        "generated_at": rfc3339(generated_at) if generated_at else None,
        "source": report.source,
        "counts": {
            WORD[s]: sum(r.status is s for r in ordered)
            for s in Status
            if any(r.status is s for r in ordered)
        },
        "tiles": [
            _tile(r, history.points.get(r.id, ()), _since(r, replays[r.id], length))
            for r in ordered
        ],
        "details": _details(report, settings),
        "deviations": _deviation_table(report, settings.deviation.tipos),
        "reproduce": reproduce_command(report, settings),
        "charts": _charts(report, history),
        "history": history,
        **_alerts(report, history, replays),
        "error_classes": settings.report.error_classes,
        "notes": list(report.notes),
        "data_quality": dict(report.data_quality),
        "slos": slo_tiles(report_views(report) if slos is None else slos),
    }
    return environment().get_template("report.html.j2").render(context)


def evaluate_page(
    settings: Settings,
    at: datetime,
    length: timedelta | None,
    recording: datetime | None = None,
    store: Store | None = None,
) -> tuple[Report, str]:
    """`check --format html`: evaluate one window, add triage and history, render the page
    (`recording`: first judge the SLO buckets, as `evaluate_once` does); on `store`, when the
    caller has it open already, else on the store opened for it."""
    if store is None:
        with open_configured(settings.store) as opened:
            return evaluate_page(settings, at, length, recording, opened)
    if recording is not None:
        judge_before_run(store, settings, at, recording)
    report = run_once(store, settings, window_at(settings, at, length), triage=True)
    history = load_history(store, settings, report)
    slos = slo_views(store, settings, report)
    return report, render_page(report, history, settings=settings, slos=slos)
