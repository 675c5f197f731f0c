"""Small SVG charts, drawn in Python: a check's value over its recent windows, and alert spans.

The charts are inline SVG with no script and no external reference, so the
page that holds them renders offline. They stay readable from 1 to 500
points: markers (with a hover title each) only up to `MARKERS` points, a line
always, breached windows shaded *and* marked with a triangle (never colour
alone), the target as a dashed line, axis labels in the check's unit.
Every data-derived text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from checks.base import Status
from watchdog.core.durations import human_duration
from watchdog.core.times import rfc3339

MARKERS = 100  # above this many points, no per-point markers: the line carries the shape

WIDTH, HEIGHT = 360, 150
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 18, 34

BREACHING = (Status.BREACHED, Status.ERROR)


@dataclass(frozen=True)
class Point:
    """One evaluation of a check: the end of its window, its value and status.

    `recorded`: the alert pipeline ran on it (the run log holds it), or a
    replay treats it as such a run. A read-only evaluation (`check --format
    html`) is a point on the charts but fires no alert.
    """

    window_end: datetime
    value: float | None
    status: Status
    recorded: bool = True


@dataclass(frozen=True)
class Episode:
    """One alert: when it fired and when it resolved (None while it still fires)."""

    check_id: str
    fired_at: datetime
    resolved_at: datetime | None


UNIT_LABEL = {"ratio": "%", "ms": "ms", "s": "seconds", "count": "count"}


def tick_label(value: float, unit: str) -> str:
    """An axis value in its unit: 5%, 3000 ms, 4h, 7."""
    if unit == "ratio":
        return f"{value * 100:.3g}%"
    if unit == "ms":
        return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.3g} s"
    if unit == "s":
        return human_duration(value) if value else "0s"
    return f"{value:.4g}"


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is at least `value` (value > 0)."""
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)


# Round tops for a time axis, in seconds: 1m .. 4w.
TIME_STEPS = (60, 300, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400, 172800, 604800, 2419200)


def axis_top(value: float, unit: str) -> float:
    """A round top for the y axis that leaves room above `value`."""
    if value <= 0:
        return 1.0 if unit != "s" else 60.0
    if unit == "s":
        return next((float(s) for s in TIME_STEPS if s >= value * 1.1), nice_ceiling(value * 1.1))
    if unit == "ratio" and value <= 1:
        return min(nice_ceiling(value * 1.1), 1.0)
    return nice_ceiling(value * 1.1)


def _fmt(number: float) -> str:
    return f"{number:.1f}"


def _time_label(moment: datetime) -> str:
    return moment.strftime("%m-%d %H:%M")


def value_chart(
    points: Sequence[Point],
    *,
    target: float,
    unit: str,
    title: str,
) -> Markup:
    """A line chart of `points` (oldest first) with the target and breached windows marked."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [p.value for p in points if p.value is not None]
    high = axis_top(max([*values, target, 0.0]), unit)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - min(value, high) / high)

    times = [p.window_end for p in points]
    first, last = (min(times), max(times)) if times else (None, None)
    span = (last - first).total_seconds() if first and last else 0.0

    def x(moment: datetime) -> float:
        if not span or first is None:
            return LEFT + plot_w / 2
        return LEFT + plot_w * (moment - first).total_seconds() / span

    band = max(2.0, plot_w / max(len(points), 1) * 0.9)
    breached = sum(p.status in BREACHING for p in points)
    latest = points[-1] if points else None
    desc = f"{len(points)} windows, {breached} breached"
    if latest is not None:
        value_text = tick_label(latest.value, unit) if latest.value is not None else "no value"
        desc += f"; latest {value_text} ({latest.status.value})"
    out: list[str] = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img"'
        f' data-points="{len(points)}">',
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>",
    ]
    # Breached windows: a shaded band behind the plot.
    for p in points:
        if p.status in BREACHING:
            out.append(
                f'<rect class="band" x="{_fmt(x(p.window_end) - band / 2)}" y="{TOP}"'
                f' width="{_fmt(band)}" height="{plot_h}"/>'
            )
    # Axes, gridlines and tick labels.
    out.append(
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"/>'
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}"/>'
    )
    for fraction in (0.5, 1.0):
        tick = high * fraction
        out.append(
            f'<line class="grid" x1="{LEFT}" y1="{_fmt(y(tick))}" x2="{LEFT + plot_w}"'
            f' y2="{_fmt(y(tick))}"/>'
        )
    for tick in (0.0, high / 2, high):
        out.append(
            f'<text class="tick" x="{LEFT - 4}" y="{_fmt(y(tick) + 3)}" text-anchor="end">'
            f"{escape(tick_label(tick, unit))}</text>"
        )
    out.append(
        f'<text class="unit" x="{LEFT - 4}" y="{TOP - 6}" text-anchor="end">'
        f"{escape(UNIT_LABEL.get(unit, unit))}</text>"
    )
    if first is not None and last is not None:
        out.append(
            f'<text class="tick" x="{LEFT}" y="{TOP + plot_h + 13}" text-anchor="start">'
            f"{escape(_time_label(first))}</text>"
        )
        if span:
            out.append(
                f'<text class="tick" x="{LEFT + plot_w}" y="{TOP + plot_h + 13}"'
                f' text-anchor="end">{escape(_time_label(last))}</text>'
            )
    out.append(
        f'<text class="caption" x="{LEFT + plot_w / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
        "window end (UTC)</text>"
    )
    # The target.
    out.append(
        f'<line class="target" x1="{LEFT}" y1="{_fmt(y(target))}" x2="{LEFT + plot_w}"'
        f' y2="{_fmt(y(target))}" data-target="{escape(repr(float(target)))}"/>'
        f'<text class="target-label" x="{LEFT + plot_w}" y="{_fmt(y(target) - 3)}"'
        f' text-anchor="end">target {escape(tick_label(target, unit))}</text>'
    )
    # The line, broken where a window had no value.
    runs: list[list[str]] = [[]]
    for p in points:
        if p.value is None:
            runs.append([])
        else:
            runs[-1].append(f"{_fmt(x(p.window_end))},{_fmt(y(p.value))}")
    for run in runs:
        if len(run) > 1:
            out.append(f'<polyline class="line" points="{" ".join(run)}"/>')
    # Markers: a triangle for a breached window, a dot otherwise, hollow without a verdict.
    if len(points) <= MARKERS:
        radius = 3.0 if len(points) <= 50 else 2.0
        for p in points:
            if p.value is None:
                continue
            cx, cy = x(p.window_end), y(p.value)
            label = f"{rfc3339(p.window_end)}: {tick_label(p.value, unit)} ({p.status.value})"
            attrs = (
                f' data-window-end="{escape(rfc3339(p.window_end))}"'
                f' data-value="{escape(repr(float(p.value)))}" data-status="{escape(p.status.value)}"'
            )
            if p.status in BREACHING:
                r = radius + 1.5
                shape = (
                    f'<path class="mark breach"{attrs} d="M{_fmt(cx)},{_fmt(cy - r)}'
                    f' L{_fmt(cx + r)},{_fmt(cy + r)} L{_fmt(cx - r)},{_fmt(cy + r)} Z">'
                )
                out.append(f"{shape}<title>{escape(label)}</title></path>")
            else:
                kind = "ok" if p.status is Status.OK else "other"
                out.append(
                    f'<circle class="mark {kind}"{attrs} cx="{_fmt(cx)}" cy="{_fmt(cy)}"'
                    f' r="{radius}"><title>{escape(label)}</title></circle>'
                )
    else:
        # Too many points for markers: breached windows get a tick under the axis.
        for p in points:
            if p.status in BREACHING:
                cx = x(p.window_end)
                base = TOP + plot_h
                out.append(
                    f'<path class="mark breach tick-mark" d="M{_fmt(cx)},{base + 1}'
                    f' L{_fmt(cx + 2.5)},{base + 6} L{_fmt(cx - 2.5)},{base + 6} Z"/>'
                )
    out.append("</svg>")
    return Markup("".join(out))


def timeline_chart(
    episodes: Sequence[Episode], *, start: datetime, end: datetime, title: str
) -> Markup:
    """Alert spans per check between `start` and `end`: a bar from fired to resolved."""
    checks = list(dict.fromkeys(e.check_id for e in episodes))
    row_h, label_w, right = 22, 150, 12
    height = TOP + row_h * max(len(checks), 1) + BOTTOM
    plot_w = WIDTH * 2 - label_w - right
    span = max((end - start).total_seconds(), 1.0)

    def x(moment: datetime) -> float:
        clipped = min(max(moment, start), end)
        return label_w + plot_w * (clipped - start).total_seconds() / span

    out = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH * 2} {height}" width="100%" role="img">',
        f"<title>{escape(title)}</title>",
        f"<desc>{len(episodes)} alert episodes between {escape(rfc3339(start))}"
        f" and {escape(rfc3339(end))}</desc>",
    ]
    for row, check_id in enumerate(checks):
        top = TOP + row * row_h
        out.append(
            f'<text class="tick" x="{label_w - 6}" y="{top + 14}" text-anchor="end">'
            f"{escape(check_id)}</text>"
        )
        for e in episodes:
            if e.check_id != check_id:
                continue
            left = x(e.fired_at)
            finish = x(e.resolved_at or end)
            state = "resolved" if e.resolved_at else "firing"
            label = f"{check_id}: fired {rfc3339(e.fired_at)}" + (
                f", resolved {rfc3339(e.resolved_at)}" if e.resolved_at else ", still firing"
            )
            out.append(
                f'<rect class="span {state}" x="{_fmt(left)}" y="{top + 4}"'
                f' width="{_fmt(max(finish - left, 3.0))}" height="{row_h - 8}"'
                f' data-fired-at="{escape(rfc3339(e.fired_at))}"><title>{escape(label)}</title></rect>'
            )
            if not e.resolved_at:
                out.append(
                    f'<text class="tick" x="{_fmt(finish - 3)}" y="{top + 14}"'
                    ' text-anchor="end">firing ▶</text>'
                )
    base = TOP + row_h * max(len(checks), 1)
    out.append(
        f'<line class="axis" x1="{label_w}" y1="{base}" x2="{label_w + plot_w}" y2="{base}"/>'
        f'<text class="tick" x="{label_w}" y="{base + 13}" text-anchor="start">'
        f"{escape(_time_label(start))}</text>"
        f'<text class="tick" x="{label_w + plot_w}" y="{base + 13}" text-anchor="end">'
        f"{escape(_time_label(end))}</text>"
        f'<text class="caption" x="{label_w + plot_w / 2}" y="{base + 28}"'
        ' text-anchor="middle">time (UTC)</text>'
    )
    if not checks:
        out.append(
            f'<text class="caption" x="{WIDTH}" y="{TOP + 14}" text-anchor="middle">'
            "no alert in this period</text>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def window_span(points: Sequence[Point], fallback_end: datetime, length: timedelta) -> datetime:
    """The earliest window start among `points` (for the timeline's left edge)."""
    if not points:
        return fallback_end - length
    return min(p.window_end for p in points) - length


def sparkline(points: Sequence[Point], *, target: float, unit: str, title: str) -> Markup:
    """A tile's tiny chart: the value over the recent windows, the target, breaches marked."""
    width, height, pad = 132, 28, 3
    values = [p.value for p in points if p.value is not None]
    high = axis_top(max([*values, target, 0.0]), unit)
    times = [p.window_end for p in points]
    first, last = (min(times), max(times)) if times else (None, None)
    span = (last - first).total_seconds() if first and last else 0.0

    def x(moment: datetime) -> float:
        if not span or first is None:
            return width / 2
        return pad + (width - 2 * pad) * (moment - first).total_seconds() / span

    def y(value: float) -> float:
        return pad + (height - 2 * pad) * (1 - min(value, high) / high)

    breached = sum(p.status in BREACHING for p in points)
    out = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' role="img" data-points="{len(points)}">',
        f"<title>{escape(title)}: {len(points)} windows, {breached} breached</title>",
        f'<line class="target" x1="0" y1="{_fmt(y(target))}" x2="{width}" y2="{_fmt(y(target))}"/>',
    ]
    run: list[str] = []
    runs = [run]
    for p in points:
        if p.value is None:
            run = []
            runs.append(run)
        else:
            run.append(f"{_fmt(x(p.window_end))},{_fmt(y(p.value))}")
    out += [f'<polyline class="line" points="{" ".join(r)}"/>' for r in runs if len(r) > 1]
    for p in points:
        if p.status in BREACHING:
            cx = x(p.window_end)
            cy = y(p.value) if p.value is not None else height - pad
            out.append(
                f'<path class="mark breach" d="M{_fmt(cx)},{_fmt(cy - 3)} L{_fmt(cx + 3)},'
                f'{_fmt(cy + 2.5)} L{_fmt(cx - 3)},{_fmt(cy + 2.5)} Z"/>'
            )
    if points and points[-1].value is not None and points[-1].status not in BREACHING:
        out.append(
            f'<circle class="mark ok" cx="{_fmt(x(points[-1].window_end))}"'
            f' cy="{_fmt(y(points[-1].value))}" r="2"/>'
        )
    out.append("</svg>")
    return Markup("".join(out))
