"""The backtest page: one self-contained HTML document, one chart per check.

In the style of the triage page (watchdog.report.page: the same stylesheet,
the same charts): per check its value in each window of the period, the
target as a dashed line, breached windows shaded and marked; beside it the
summary and the candidate targets; then the windows that breached, each
with the `check` that shows it in full
(docs/operations.md#the-first-week-backtest-set-targets-explain-the-outliers).
No script, nothing fetched, every value from the data escaped by Jinja2.
"""

from __future__ import annotations

import statistics
from typing import Any

from checks.base import Status
from checks.verdict import percent, value_in
from watchdog.core.settings import Settings
from watchdog.core.times import rfc3339
from watchdog.report.backtest import WEEKLY, Backtest, CheckSummary, nearest_rank
from watchdog.report.charts import Point, value_chart
from watchdog.report.page import ICON, WORD, environment, reproduce_command
from watchdog.runner.plugins import default_settings


def _check(backtest: Backtest, s: CheckSummary) -> dict[str, Any]:
    """One check's chart and numbers."""
    points = [
        Point(r.window.end, r.checks[s.check_id].value, r.checks[s.check_id].status)
        for r in backtest.reports
    ]
    worst = Status.BREACHED if s.breached else Status.OK
    shares = sorted(x for x in s.at_or_above or () if x is not None)
    return {
        "id": s.check_id,
        "status": worst.value,
        "icon": ICON[worst],
        "word": f"{s.breached} of {s.windows} breached",
        "svg": value_chart(
            points,
            target=s.target,
            unit=s.unit,
            title=f"{s.check_id} in each of {len(points)} windows",
        ),
        "numbers": [
            ("min", value_in(s.unit, s.low)),
            ("median", value_in(s.unit, s.median)),
            ("p95", value_in(s.unit, s.p95)),
            ("max", value_in(s.unit, s.high)),
        ],
        "candidates": [
            {
                "target": f"{s.comparison.value} {value_in(s.unit, c.target)}",
                "breached": c.breached,
                "why": c.why,
                "mark": c.why in ("current", WEEKLY),
            }
            for c in s.candidates
        ],
        "shares": (
            {
                "threshold": value_in(s.unit, s.target),
                "median": percent(statistics.median(shares)),
                "p95": percent(nearest_rank(shares, 0.95)),
                "max": percent(shares[-1]),
            }
            if shares
            else None
        ),
    }


def render_backtest_page(backtest: Backtest, settings: Settings | None = None) -> str:
    """The backtest as one self-contained HTML document."""
    settings = settings or default_settings()
    reports = backtest.reports
    breached = backtest.breached_windows
    status = Status.BREACHED if breached else Status.OK
    first = reports[0] if reports else None
    context = {
        "status": status.value,
        "status_icon": ICON[status],
        "status_word": WORD[status],
        "source": first.source if first else settings.source.display_name,
        "start": rfc3339(backtest.start),
        "end": rfc3339(backtest.end),
        "windows": len(reports),
        "length": first.window.length if first else None,
        "lookback": first.window.lookback if first else None,
        "checks": [_check(backtest, s) for s in backtest.summary.values() if s.windows],
        "disabled": [s.check_id for s in backtest.summary.values() if not s.windows],
        "breached": [
            {
                "end": rfc3339(r.window.end),
                "checks": [
                    c.id for c in r.ordered() if c.status in (Status.BREACHED, Status.ERROR)
                ],
                "command": reproduce_command(r, settings),
            }
            for r in breached
        ],
    }
    return environment().get_template("backtest.html.j2").render(context)
