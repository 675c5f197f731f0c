"""The triage page: one self-contained HTML report per evaluation.

`render_page` turns a Report (with its triage breakdown) and its History
into one HTML document: inline CSS and SVG, no script, nothing fetched, so it
renders offline and prints cleanly. Jinja2 autoescapes every value from the
data; error text appears only as normalised classes (checks.triage), and
payload values never do.

Its history comes from `watchdog.report.history`; the files it is written
to from `watchdog.report.files`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from checks.base import CheckResult, Report, Status
from checks.builtin import configured_checks
from checks.kinds import (
    Anchor,
    CheckSpec,
    Coverage,
    DeviationContract,
    DeviationEvidence,
    OutcomeRate,
    Quantile,
    Share,
    Streak,
)
from checks.triage import with_triage
from checks.verdict import format_target, format_value
from watchdog.core.durations import format_duration
from watchdog.core.settings import Settings
from watchdog.core.store import open_configured
from watchdog.core.times import rfc3339
from watchdog.report.charts import BREACHING, Point, sparkline, timeline_chart, value_chart
from watchdog.report.history import History, load_history
from watchdog.runner.once import run_once, window_at

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
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("watchdog.report", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _duration_ms(ms: int) -> str:
    return format_duration(timedelta(milliseconds=ms))


def defining_parameters(spec: CheckSpec) -> list[tuple[str, str]]:
    """The parameters that define a check, so the reader can reproduce its verdict."""
    p = spec.params
    out: list[tuple[str, str]] = []
    if isinstance(p, Coverage):
        for ob in p.obligations:
            if ob.anchor is Anchor.START:
                out.append(("recall_grace", f"{_duration_ms(ob.grace_ms)} after the first event"))
            elif ob.anchor is Anchor.END:
                out.append(("observe_grace", f"{_duration_ms(ob.grace_ms)} after the end event"))
                out.append(("idle_timeout", f"{_duration_ms(ob.idle_ms)} (a silent end)"))
                out.append(("observe lead", f"{_duration_ms(ob.lead_ms)} before the end"))
            elif ob.positive_results:
                out.append(("recall_grace", f"{_duration_ms(ob.grace_ms)} to inject results"))
            else:
                out.append(("observe_grace", f"{_duration_ms(ob.grace_ms)} after a compaction"))
    elif isinstance(p, OutcomeRate):
        out.append(("lost after", f"{_duration_ms(p.grace_ms)} without an outcome"))
    elif isinstance(p, Quantile):
        out.append(("quantile", f"{p.q_num}/{p.q_den} of {p.field}, nearest rank"))
    elif isinstance(p, Streak):
        out.append(("failures", ", ".join(p.bad)))
    elif isinstance(p, Share):
        out.append(("share of", f"{p.field} = {p.value}"))
    elif isinstance(p, DeviationContract | DeviationEvidence):
        contract = p if isinstance(p, DeviationContract) else p.contract
        out.append(("tipos", ", ".join(contract.tipos)))
        out.append(("max evidence ids", str(contract.max_evidence)))
    if spec.min_samples:
        out.append(("min_samples", str(spec.min_samples)))
    if spec.window_ms is not None:
        out.append(("window", _duration_ms(spec.window_ms)))
    return out


def _evidence(result: CheckResult) -> dict[str, Any]:
    """The evidence in lists and facts the template shows (ids, counts, times; no payload)."""
    evidence = dict(result.evidence)
    facts: list[tuple[str, str]] = []
    if "length" in evidence:
        facts.append(
            (
                "failure streak",
                f"{evidence['length']} from {evidence['start']} to {evidence['end']}",
            )
        )
    for key in ("completed", "failed", "lost", "matching", "at_or_above_target", "missing_ids"):
        if key in evidence:
            facts.append((key.replace("_", " "), str(evidence[key])))
    if evidence.get("newest"):
        facts.append(("newest event", str(evidence["newest"])))
    kinds = evidence.get("kinds") or {}
    return {
        "sessions": [str(s) for s in evidence.get("sessions") or []],
        "events": [str(e) for e in evidence.get("events") or []],
        "facts": facts,
        "kinds": [(str(k).replace("_", " "), int(v)) for k, v in dict(kinds).items()],
    }


def breached_since(series: Sequence[Point]) -> tuple[datetime, int] | None:
    """The end of the first window of the current breach, and how many windows it spans.

    Windows without a verdict (insufficient or no data) neither end nor count
    towards a breach, as for alerts; None when the newest window did not breach.
    """
    first, count = None, 0
    for p in reversed(series):
        if p.status in BREACHING:
            first, count = p.window_end, count + 1
        elif p.status is Status.OK:
            break
    if not series or series[-1].status not in BREACHING or first is None:
        return None
    return first, count


def _tile(
    result: CheckResult, series: Sequence[Point] = (), length: timedelta | None = None
) -> dict[str, Any]:
    since = breached_since(series) if length is not None else None
    since_text = ""
    if since is not None and length is not None:
        first, count = since
        start = (first - length).strftime("%m-%d %H:%M")
        since_text = "new in this window" if count == 1 else f"since {start} UTC · {count} windows"
    return {
        "since": since_text,
        "spark": sparkline(
            series, target=result.target, unit=result.unit, title=f"{result.id} history"
        )
        if series and result.status is not Status.DISABLED
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
        "breaching": result.status in (Status.BREACHED, Status.ERROR),
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


def _triage(found: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The triage breakdown of one check, shares as percentages for the page."""
    if not found:
        return None
    groups = [
        (
            dimension,
            [
                {
                    "value": g["value"] or "(empty)",
                    "count": g["count"],
                    "share": f"{g['share'] * 100:.1f}%",
                    "width": round(g["share"] * 100, 1),
                }
                for g in rows
            ],
        )
        for dimension, rows in dict(found.get("groups") or {}).items()
    ]
    return {
        "total": found.get("items", 0),
        "noun": found.get("noun", "items"),
        "groups": groups,
        "sessions": list(found.get("sessions") or []),
        "error": found.get("error"),
    }


def reproduce_command(report: Report) -> str:
    """The exact `memory-watchdog check` that evaluates this window again."""
    return (
        f"memory-watchdog check --at {rfc3339(report.window.at)}"
        f" --window {format_duration(report.window.length)}"
    )


def render_page(
    report: Report,
    history: History | None = None,
    *,
    settings: Settings | None = None,
    generated_at: datetime | None = None,
) -> str:
    """The report as one self-contained HTML document."""
    settings = settings or Settings()
    history = (history or History(windows=settings.report.history)).with_report(report)
    specs = {spec.id: spec for spec in configured_checks(settings)}
    ordered = report.ordered()
    details = [
        {
            "tile": _tile(r),
            "parameters": defining_parameters(specs[r.id]) if r.id in specs else [],
            "evidence": _evidence(r),
            "triage": _triage(report.triage.get(r.id)),
        }
        for r in ordered
        if r.status in (Status.BREACHED, Status.ERROR)
    ]
    charts = [
        {
            "id": r.id,
            "status": r.status.value,
            "icon": ICON[r.status],
            "word": WORD[r.status],
            "svg": value_chart(
                history.points.get(r.id, ()),
                target=r.target,
                unit=r.unit,
                title=f"{r.id} over the last {len(history.points.get(r.id, ()))} windows",
            ),
            "unit": r.unit,
        }
        for r in ordered
        if r.status is not Status.DISABLED
    ]
    all_points = [p for series in history.points.values() for p in series]
    start = (
        min(p.window_end for p in all_points) - report.window.length
        if all_points
        else report.window.start
    )
    timeline = timeline_chart(
        history.alerts, start=start, end=report.window.end, title="Alert timeline"
    )
    context = {
        "report": report,
        "status": report.status.value,
        "status_icon": ICON[report.status],
        "status_word": WORD[report.status],
        "window_start": rfc3339(report.window.start),
        "window_end": rfc3339(report.window.end),
        "window_length": format_duration(report.window.length),
        "lookback": format_duration(report.window.lookback),
        "evaluated_at": rfc3339(report.window.at),
        "generated_at": rfc3339(generated_at) if generated_at else None,
        "source": report.source,
        "counts": {
            WORD[s]: sum(r.status is s for r in ordered)
            for s in Status
            if any(r.status is s for r in ordered)
        },
        "tiles": [_tile(r, history.points.get(r.id, ()), report.window.length) for r in ordered],
        "details": details,
        "deviations": _deviation_table(report, settings.deviation.tipos),
        "reproduce": reproduce_command(report),
        "charts": charts,
        "history": history,
        "timeline": timeline,
        "episodes": [
            {
                "check": e.check_id,
                "fired_at": rfc3339(e.fired_at),
                "resolved_at": rfc3339(e.resolved_at) if e.resolved_at else None,
            }
            for e in history.alerts
        ],
        "error_classes": settings.report.error_classes,
        "notes": list(report.notes),
        "data_quality": dict(report.data_quality),
    }
    return _environment().get_template("report.html.j2").render(context)


def evaluate_page(settings: Settings, at: datetime, length: timedelta | None) -> tuple[Report, str]:
    """`check --format html`: evaluate one window, add triage and history, render the page."""

    with open_configured(settings.store) as store:
        report = with_triage(
            store, settings, run_once(store, settings, window_at(settings, at, length))
        )
        history = load_history(store, settings, report)
    return report, render_page(report, history, settings=settings)
