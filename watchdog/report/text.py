"""The report for people (text) and for scripts (JSON).

The text is one line per check, breaches first, then the evidence of what breached
(docs/checks.md#memory-watchdog-check); the JSON is
docs/spec.md#6-the-report-json---format-json-schema_version-1.
"""

from __future__ import annotations

from datetime import datetime

from checks.base import CheckResult, Report, SloReport, Status, Window
from checks.slo.budget import SloStatus, TierState
from checks.verdict import format_target, format_value
from watchdog.core import jsontext
from watchdog.core.durations import format_duration, human_duration
from watchdog.core.text import printable
from watchdog.core.times import rfc3339
from watchdog.report.explain import explain_command

TEXT_EVIDENCE = 5  # items per check in the text report; the JSON report has up to 20
ID_CHARS = 100  # an id longer than this is cut in the text report (JSON keeps it whole)
SUMMARY_CHARS = 500

_MARK = {
    Status.OK: "✓",
    Status.BREACHED: "✗",
    Status.ERROR: "!",
    Status.INSUFFICIENT_DATA: "~",
    Status.NO_DATA: "?",
    Status.DISABLED: "-",
}
_COLOR = {
    Status.OK: "32",
    Status.BREACHED: "31",
    Status.ERROR: "35",
    Status.INSUFFICIENT_DATA: "33",
    Status.NO_DATA: "33",
    Status.DISABLED: "90",
}


def render_json(report: Report) -> str:
    return jsontext.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"


def _paint(text: str, status: Status, color: bool) -> str:
    return f"\033[{_COLOR[status]}m{text}\033[0m" if color else text


def _evidence_lines(result: CheckResult, window: Window, flags: str) -> list[str]:
    """The result's evidence facts, ids capped at TEXT_EVIDENCE per list; for sessions, how to
    explain one as this window judged it (with `flags`: the run's --config and --store)."""
    shown = result.evidence.shown()
    lines = []
    for found in shown.ids:
        listed = ", ".join(printable(i, ID_CHARS) for i in found.ids[:TEXT_EVIDENCE])
        rest = len(found.ids) - TEXT_EVIDENCE
        more = f" (+{rest} more in --format json)" if rest > 0 else ""
        lines.append(f"    {found.noun}: {listed}{more}")
        for event_id in found.ids[:TEXT_EVIDENCE]:
            detail = found.detail(event_id)
            if detail is not None:
                words = printable(detail.words(), SUMMARY_CHARS)
                lines.append(f"      {printable(event_id, ID_CHARS)}: {words}")
        if found.ids and (found.noun == "sessions" or found.details):
            command = explain_command(found.ids[0], window.at, flags, window.length)
            lines.append(f"    why one counted: {command}")
    lines += [f"    {fact.label}: {printable(fact.text)}" for fact in shown.facts]
    return lines


def render_text(report: Report, *, color: bool = False, flags: str = "") -> str:
    """What a person on call wants at 3 a.m.: verdicts first, breaches on top, then evidence.

    `flags` (`command_flags` of the run's settings) go into the commands it prints, so that
    they read what the run read.
    """
    status = report.status
    out = [
        _paint(f"memory-watchdog: {status.value.upper()}", status, color)
        + f"  source {printable(report.source)}",
        f"window {rfc3339(report.window.start)} .. {rfc3339(report.window.end)}"
        f" (evaluated at {rfc3339(report.window.at)})",
        "",
    ]
    width = max(len(r.id) for r in report.checks.values()) if report.checks else 10
    for result in report.ordered():
        mark = _paint(f"{_MARK[result.status]} {result.status.value:<17}", result.status, color)
        value = format_value(result, result.value)
        target = format_target(result)
        summary = printable(result.summary, SUMMARY_CHARS)
        out.append(f"{mark} {result.id:<{width}}  {value:>9}  breach {target:<10} {summary}")
    breached = [r for r in report.ordered() if r.status in (Status.BREACHED, Status.ERROR)]
    evidence = [(r, _evidence_lines(r, report.window, flags)) for r in breached]
    evidence = [(r, lines) for r, lines in evidence if lines]
    if evidence:
        out += ["", "Evidence (oldest first):"]
        for result, lines in evidence:
            out.append(f"  {result.id} [{result.severity.value}]")
            out += lines
    if report.slos:
        out += ["", "SLOs (error budget over the period, burn = bad share / allowed share):"]
        out += [slo_line(slo, color) for slo in report.slos.values()]
        if all(slo.figures.coverage == 0 for slo in report.slos.values()):
            out.append(f"  {NOTHING_JUDGED}")
            out.append(f"    {slo_backfill_command(report.window.at, flags)}")
    if report.deviations:
        out += ["", "Deviations by agente x tipo (conforming events in the window):"]
        out += [
            f"  {printable(d.agente, 64):<16} {printable(d.tipo, 64):<28} {d.count}"
            for d in report.deviations
        ]
    for note in report.notes:
        out.append(f"note: {printable(note, SUMMARY_CHARS)}")
    return "\n".join(out) + "\n"


# Said under SLO lines none of which has a judged bucket (the ledger is empty for them).
NOTHING_JUDGED = (
    "no SLO bucket is judged yet: the daemon and check --notify judge each as it closes"
    " (a read-only check judges none); to judge the past:"
)


def slo_backfill_command(at: datetime, flags: str = "") -> str:
    """The `slo backfill` that judges the buckets of the longest period up to `at`."""
    command = f"memory-watchdog slo backfill --to {rfc3339(at)}"
    return f"{command} {flags}" if flags else command


_SLO_STATUS = {
    SloStatus.OK: Status.OK,
    SloStatus.TOO_FEW_EVENTS: Status.INSUFFICIENT_DATA,
    SloStatus.NO_DATA: Status.NO_DATA,
    SloStatus.EXHAUSTED: Status.BREACHED,
}


def _burn(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def slo_line(slo: SloReport, color: bool = False) -> str:
    """One SLO in a line: its status, objective and period, the budget left, the burn of the
    page windows and 3d, the tiers firing, the time to exhaustion, the coverage when partial."""
    f = slo.figures
    status = f.status
    mark = _paint(f"{status.value:<14}", _SLO_STATUS[status], color)
    objective = f"{float(slo.spec.objective) * 100:g}%"
    period = format_duration(slo.spec.params.period)
    left = "budget -" if f.budget is None else f"budget {f.budget.remaining * 100:.1f}% left"
    burns = " ".join(f"{w} {_burn(f.burn[w])}" for w in ("5m", "1h", "6h", "3d"))
    parts = [f"  {mark} {slo.name:<18} {objective} over {period}", left, f"burn {burns}"]
    firing = [t.tier.name for t in f.tiers if t.state is TierState.FIRING]
    if firing:
        parts.append(f"firing: {', '.join(firing)}")
    if f.exhaustion_s is not None:
        parts.append(f"spent in {human_duration(f.exhaustion_s)}" if f.exhaustion_s else "")
    if f.coverage < 1:
        parts.append(f"coverage {f.coverage * 100:.0f}%")
    return "  ".join(p for p in parts if p)
