"""The page's error budgets (docs/slo.md#the-page): a tile per SLO, its budget burning down over
the period, and each tier's burns against its factor.

Drawn from the SLO's `SloFigures` at the page's time and the judged buckets of its period; inline
SVG like the rest of the page (watchdog.report.charts), no script, every text escaped.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import accumulate
from typing import Any

from markupsafe import Markup, escape

from alerts.state import load_buckets
from checks.base import Report, SloSpec, Status
from checks.slo.budget import Bucket, SloFigures, SloStatus, TierFigures, TierState
from checks.verdict import percent
from watchdog.core.durations import format_duration, human_duration
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.charts import Point, axis_top, value_chart

STEP = timedelta(hours=1)  # the burndown's points: the remaining budget at every hour

# An SLO's status as the page's status colours show it.
STATUS = {
    SloStatus.OK: Status.OK,
    SloStatus.EXHAUSTED: Status.BREACHED,
    SloStatus.TOO_FEW_EVENTS: Status.INSUFFICIENT_DATA,
    SloStatus.NO_DATA: Status.NO_DATA,
}
WORD = {
    SloStatus.OK: "Within budget",
    SloStatus.EXHAUSTED: "Budget exhausted",
    SloStatus.TOO_FEW_EVENTS: "Too few events",
    SloStatus.NO_DATA: "No data",
}


@dataclass(frozen=True)
class SloView:
    """What the page shows of one SLO: its spec, its figures at the page's time, and the judged
    buckets of its period (oldest first or not: they are sorted here)."""

    spec: SloSpec
    figures: SloFigures
    buckets: Sequence[Bucket] | None = ()  # None: not read (the page draws no burndown)


def burndown(view: SloView, step: timedelta = STEP) -> list[Point]:
    """The remaining budget at every `step` over the period up to the figures' time, each over
    the buckets of `[t - period, t)` given (None, a gap, where they hold no event): the figures'
    `1 - bad / ((1 - objective) x total)`, by running sums rather than the figures at each point
    (720 points over 30 days). The last point is the tile's remaining."""
    params, at = view.spec.params, view.figures.at
    given = view.buckets or ()
    buckets = sorted((b for b in given if b.start < at), key=lambda b: b.start)
    starts = [b.start for b in buckets]
    good = [0, *accumulate(b.good for b in buckets)]
    bad = [0, *accumulate(b.bad for b in buckets)]
    points = []
    count = params.period // step
    for i in range(count, -1, -1):
        t = at - i * step
        lo, hi = bisect.bisect_left(starts, t - params.period), bisect.bisect_left(starts, t)
        spent, total = bad[hi] - bad[lo], good[hi] - good[lo] + bad[hi] - bad[lo]
        remaining = 1 - spent / (params.error_share * total) if total else None
        status = Status.BREACHED if remaining is not None and remaining <= 0 else Status.OK
        value = None if remaining is None else float(remaining)
        points.append(Point(window_end=t, value=value, status=status))
    return points


def _burn_text(burn: float | None) -> str:
    return "no data" if burn is None else f"{burn:.3g}×"


def burn_chart(figures: SloFigures, title: str) -> Markup:
    """Each tier's long and short burn as bars against its factor (a dashed mark): a tier fires
    when both bars pass it. A window with no event has no bar and says "no data"."""
    width, row_h, label_w, right, top = 360, 34, 92, 52, 16
    height = top + row_h * len(figures.tiers) + 18
    plot_w = width - label_w - right
    values = [
        v for t in figures.tiers for v in (t.long_burn, t.short_burn, t.factor) if v is not None
    ]
    high = axis_top(max([*values, 1.0]), "count")

    def x(value: float) -> float:
        return label_w + plot_w * min(value, high) / high

    out = [
        f'<svg class="burn" viewBox="0 0 {width} {height}" width="100%" role="img"'
        f' data-tiers="{len(figures.tiers)}">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape('; '.join(_tier_desc(t) for t in figures.tiers))}</desc>",
    ]
    for row, tier in enumerate(figures.tiers):
        y = top + row * row_h
        out.append(
            f'<text class="tick" x="{label_w - 6}" y="{y + 16}" text-anchor="end">'
            f"{escape(tier.tier.name)}</text>"
        )
        for offset, (burn, window) in enumerate(
            ((tier.long_burn, tier.tier.long), (tier.short_burn, tier.tier.short))
        ):
            bar_y, label = y + 4 + offset * 12, f"{format_duration(window)} {_burn_text(burn)}"
            if burn is not None:
                over = "over" if burn > tier.factor else "under"
                out.append(
                    f'<rect class="bar {over}" x="{label_w}" y="{bar_y}"'
                    f' width="{max(x(burn) - label_w, 1.0):.1f}" height="10"'
                    f' data-window="{escape(format_duration(window))}"'
                    f' data-burn="{escape(repr(burn))}"><title>{escape(label)}</title></rect>'
                )
            out.append(
                f'<text class="tick" x="{width - right + 4}" y="{bar_y + 9}">{escape(label)}</text>'
            )
        fx = x(tier.factor)
        out.append(
            f'<line class="target" x1="{fx:.1f}" y1="{y + 1}" x2="{fx:.1f}" y2="{y + 29}"'
            f' data-factor="{escape(repr(tier.factor))}"/>'
            f'<text class="target-label" x="{fx:.1f}" y="{y + 1}" text-anchor="middle">'
            f"{escape(f'{tier.factor:.3g}×')}</text>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def _tier_desc(tier: TierFigures) -> str:
    return (
        f"{tier.tier.name} {tier.state.value}: {_burn_text(tier.long_burn)} and"
        f" {_burn_text(tier.short_burn)} against {tier.factor:.3g}"
    )


def _exhaustion(figures: SloFigures) -> str:
    if figures.exhaustion_s is None:
        return "not burning"
    if figures.exhaustion_s == 0:
        return "exhausted"
    return f"in {human_duration(figures.exhaustion_s)} at the 6h burn"


def slo_views(store: Store, settings: Settings, report: Report) -> list[SloView]:
    """The report's SLOs with the judged buckets of their periods, for the burndown."""
    source = settings.source.display_name
    found = []
    for slo in report.slos.values():
        at, period = slo.figures.at, slo.spec.params.period
        rows = load_buckets(store, settings, source, slo.name, at - period, at)
        buckets = [Bucket(r.start, r.good, r.bad) for r in rows]
        found.append(SloView(slo.spec, slo.figures, buckets))
    return found


def report_views(report: Report) -> list[SloView]:
    """The report's SLOs without their buckets (a page rendered with no store at hand)."""
    return [SloView(slo.spec, slo.figures, None) for slo in report.slos.values()]


def slo_tiles(views: Sequence[SloView]) -> list[dict[str, Any]]:
    """The context of the page's SLO section: one entry per SLO, its tile and its two charts."""
    found = []
    for view in views:
        spec, figures = view.spec, view.figures
        budget = figures.budget
        firing = [t.tier.name for t in figures.tiers if t.state is TierState.FIRING]
        found.append(
            {
                "name": spec.name,
                "check": spec.check.id,
                "status": STATUS[figures.status].value,
                "word": WORD[figures.status],
                "objective": percent(float(spec.objective)),
                "period": format_duration(spec.params.period),
                "remaining": "—" if budget is None else percent(budget.remaining),
                "consumed": None if budget is None else budget.consumed,
                "allowed": None if budget is None else f"{budget.allowed:.4g}",
                "total": figures.total,
                "coverage": percent(figures.coverage),
                "exhaustion": _exhaustion(figures),
                "firing": firing,
                "burndown": None
                if view.buckets is None
                else value_chart(
                    burndown(view),
                    target=0.0,
                    unit="ratio",
                    title=f"{spec.name}: budget remaining over {format_duration(spec.params.period)}",
                ),
                "burn": burn_chart(figures, f"{spec.name}: burn rate of each tier"),
            }
        )
    return found
