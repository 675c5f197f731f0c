"""Small SVG charts, drawn in Python: a check's value over its recent windows, and alert spans.

The charts are inline SVG with no script and no external reference, so the
page that holds them renders offline. They stay readable from 1 to 500
points: markers (with a hover title each) only up to `MARKERS` points, a line
always, breached windows shaded *and* marked with a triangle (never colour
alone), the target as a dashed line, axis labels in the check's unit.
Every data-derived text is escaped (docs/operations.md#what-is-on-it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

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
    no_data: bool = False  # a no-data alert (`no_data = "alerting"`), not a breach

    @property
    def name(self) -> str:
        """The alert as people read it: its check, and "(no data)" for a no-data alert."""
        return f"{self.check_id} (no data)" if self.no_data else self.check_id


UNIT_LABEL = {"ratio": "%", "ms": "ms", "s": "seconds", "count": "count"}


def tick_label(value: float, unit: str, *, seconds: bool | None = None) -> str:
    """An axis value in its unit: 5%, 3000 ms, 4h, 7; any finite value, never inf.

    `seconds` writes milliseconds as seconds; an axis passes the same choice for
    all its ticks (by its top), so one axis never mixes `5000 ms` and `10 s`.
    """
    if unit == "ratio":
        return f"{Decimal(repr(value)) * 100:.3g}%"
    if unit == "ms":
        if seconds if seconds is not None else abs(value) >= 10_000:
            return f"{value / 1000:.3g} s"
        return f"{value:.0f} ms" if abs(value) < 1e15 else f"{value:.3g} ms"
    if unit == "s":
        if abs(value) >= 10 * DAY_S * 36500:  # beyond a thousand years: a number of days
            return f"{value / DAY_S:.3g}d"
        return human_duration(value) if value >= 0 else "-" + human_duration(-value)
    return f"{value:.4g}"


DAY_S = 86400


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is at least `value` (value > 0).

    Near the largest float there is no rounder number above it: `value` itself.
    """
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10.0**exponent if exponent < 308 or step == 1 else math.inf
        if candidate >= value * (1 - 1e-12):
            return candidate if math.isfinite(candidate) else value
    return value


# Round tops for a time axis, in seconds: 1m .. 4w.
TIME_STEPS = (60, 300, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400, 172800, 604800, 2419200)


def axis_top(value: float, unit: str) -> float:
    """A round top for the y axis that leaves room above `value` (any finite value)."""
    if value <= 0:
        return 1.0 if unit != "s" else 60.0
    value = max(value, 1e-300)  # a round number below this would underflow to zero
    room = value * 1.1 if value < sys.float_info.max / 1.1 else value
    if unit == "s":
        return next((float(s) for s in TIME_STEPS if s >= room), nice_ceiling(room))
    if unit == "ratio" and value <= 1:
        return min(nice_ceiling(room), 1.0)
    return nice_ceiling(room)


def _fmt(number: float) -> str:
    return f"{number:.1f}"


def _time_label(moment: datetime) -> str:
    return moment.strftime("%m-%d %H:%M")


@dataclass(frozen=True)
class _Scale:
    """Where a window end and a value fall in a plot area (the y axis from 0 to `high`)."""

    left: float
    top: float
    width: float
    height: float
    high: float
    first: datetime | None  # the first and last window ends
    last: datetime | None
    low: float = 0.0  # below 0 only when a value is negative

    @classmethod
    def of(
        cls,
        points: Sequence[Point],
        target: float,
        unit: str,
        area: tuple[float, float, float, float],
    ) -> _Scale:
        """The scale of `points` and the target in `area` (left, top, width, height)."""
        values = [v for v in (p.value for p in points) if v is not None and math.isfinite(v)]
        high = axis_top(max([*values, target, 0.0]), unit)
        lowest = min([*values, target, 0.0])
        low = -axis_top(-lowest, unit) if lowest < 0 else 0.0
        times = [p.window_end for p in points]
        first, last = (min(times), max(times)) if times else (None, None)
        return cls(*area, high=high, first=first, last=last, low=low)

    @property
    def seconds(self) -> bool:
        """Whether a millisecond axis is labelled in seconds (its top is 10 s or more)."""
        return max(self.high, -self.low) >= 10_000

    @property
    def span(self) -> float:
        """Seconds from the first window end to the last."""
        return (self.last - self.first).total_seconds() if self.first and self.last else 0.0

    def x(self, moment: datetime) -> float:
        span = self.span
        if not span or self.first is None:
            return self.left + self.width / 2
        return self.left + self.width * (moment - self.first).total_seconds() / span

    def y(self, value: float) -> float:
        """Where `value` falls, clamped to the axis; halves keep even the largest floats finite."""
        clamped = min(max(value, self.low), self.high)
        span = self.high - self.low
        if math.isinf(span):  # from minus to plus the largest float
            fraction = (clamped / 2 - self.low / 2) / (self.high / 2 - self.low / 2)
        else:
            fraction = (clamped - self.low) / span if span > 0 else 0.5
        return self.top + self.height * (1 - fraction)


def _runs(points: Sequence[Point], scale: _Scale) -> list[str]:
    """The line as polylines, broken where a window had no value (a gap, not a zero)."""
    runs: list[list[str]] = [[]]
    for p in points:
        if p.value is None:
            runs.append([])
        else:
            runs[-1].append(f"{_fmt(scale.x(p.window_end))},{_fmt(scale.y(p.value))}")
    return [f'<polyline class="line" points="{" ".join(run)}"/>' for run in runs if len(run) > 1]


def _chart_desc(points: Sequence[Point], unit: str) -> str:
    breached = sum(p.status in BREACHING for p in points)
    desc = f"{len(points)} windows, {breached} breached"
    if points:
        latest = points[-1]
        value_text = tick_label(latest.value, unit) if latest.value is not None else "no value"
        desc += f"; latest {value_text} ({latest.status.value})"
    return desc


def _axes(scale: _Scale, unit: str) -> list[str]:
    """Axes, gridlines, value and time tick labels, the unit and the caption."""
    left, top, right, bottom = (
        scale.left,
        scale.top,
        scale.left + scale.width,
        scale.top + scale.height,
    )
    out = [
        f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>'
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>'
    ]
    for fraction in (0.5, 1.0):
        tick = _fmt(scale.y(scale.high * fraction))
        out.append(f'<line class="grid" x1="{left}" y1="{tick}" x2="{right}" y2="{tick}"/>')
    ticks = (0.0, scale.high / 2, scale.high) + ((scale.low,) if scale.low < 0 else ())
    for value in ticks:
        out.append(
            f'<text class="tick" x="{left - 4}" y="{_fmt(scale.y(value) + 3)}" text-anchor="end">'
            f"{escape(tick_label(value, unit, seconds=scale.seconds))}</text>"
        )
    out.append(
        f'<text class="unit" x="{left - 4}" y="{top - 6}" text-anchor="end">'
        f"{escape(UNIT_LABEL.get(unit, unit))}</text>"
    )
    if scale.first is not None and scale.last is not None:
        out.append(
            f'<text class="tick" x="{left}" y="{bottom + 13}" text-anchor="start">'
            f"{escape(_time_label(scale.first))}</text>"
        )
        if scale.span:
            out.append(
                f'<text class="tick" x="{right}" y="{bottom + 13}"'
                f' text-anchor="end">{escape(_time_label(scale.last))}</text>'
            )
    out.append(
        f'<text class="caption" x="{left + scale.width / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
        "window end (UTC)</text>"
    )
    return out


def _markers(points: Sequence[Point], scale: _Scale, unit: str) -> list[str]:
    """A triangle for a breached window, a dot otherwise, hollow without a verdict.

    Above MARKERS points there are no per-point markers: breached windows get
    a tick under the axis instead.
    """
    out = []
    if len(points) > MARKERS:
        base = scale.top + scale.height
        for p in points:
            if p.status in BREACHING:
                cx = scale.x(p.window_end)
                out.append(
                    f'<path class="mark breach tick-mark" d="M{_fmt(cx)},{base + 1}'
                    f' L{_fmt(cx + 2.5)},{base + 6} L{_fmt(cx - 2.5)},{base + 6} Z"/>'
                )
        return out
    radius = 3.0 if len(points) <= 50 else 2.0
    for p in points:
        if p.value is None:
            continue
        cx, cy = scale.x(p.window_end), scale.y(p.value)
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
    return out


def value_chart(
    points: Sequence[Point],
    *,
    target: float,
    unit: str,
    title: str,
) -> Markup:
    """A line chart of `points` (oldest first) with the target and breached windows marked."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    scale = _Scale.of(points, target, unit, (LEFT, TOP, plot_w, plot_h))
    band = max(2.0, plot_w / max(len(points), 1) * 0.9)
    out: list[str] = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img"'
        f' data-points="{len(points)}">',
        f"<title>{escape(title)}</title><desc>{escape(_chart_desc(points, unit))}</desc>",
    ]
    # Breached windows: a shaded band behind the plot.
    out += [
        f'<rect class="band" x="{_fmt(scale.x(p.window_end) - band / 2)}" y="{TOP}"'
        f' width="{_fmt(band)}" height="{plot_h}"/>'
        for p in points
        if p.status in BREACHING
    ]
    out += _axes(scale, unit)
    target_y = scale.y(target)
    out.append(
        f'<line class="target" x1="{LEFT}" y1="{_fmt(target_y)}" x2="{LEFT + plot_w}"'
        f' y2="{_fmt(target_y)}" data-target="{escape(repr(float(target)))}"/>'
        f'<text class="target-label" x="{LEFT + plot_w}" y="{_fmt(target_y - 3)}"'
        f' text-anchor="end">target {escape(tick_label(target, unit))}</text>'
    )
    out += _runs(points, scale)
    out += _markers(points, scale, unit)
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
            label = f"{e.name}: fired {rfc3339(e.fired_at)}" + (
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


def has_trend(points: Sequence[Point]) -> bool:
    """Whether a sparkline has a line to draw: two windows with a value at least.

    With fewer, a tile's sparkline would be a lone marker (a breach's triangle
    floating in a box) that reads as an icon, not as a history.
    """
    return sum(p.value is not None for p in points) >= 2


def sparkline(points: Sequence[Point], *, target: float, unit: str, title: str) -> Markup:
    """A tile's tiny chart: the value over the recent windows, the target, breaches marked."""
    width, height, pad = 132, 28, 3
    scale = _Scale.of(points, target, unit, (pad, pad, width - 2 * pad, height - 2 * pad))
    breached = sum(p.status in BREACHING for p in points)
    out = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' role="img" data-points="{len(points)}">',
        f"<title>{escape(title)}: {len(points)} windows, {breached} breached</title>",
        f'<line class="target" x1="0" y1="{_fmt(scale.y(target))}" x2="{width}"'
        f' y2="{_fmt(scale.y(target))}"/>',
    ]
    out += _runs(points, scale)
    for p in points:
        if p.status in BREACHING:
            cx = scale.x(p.window_end)
            cy = scale.y(p.value) if p.value is not None else height - pad
            out.append(
                f'<path class="mark breach" d="M{_fmt(cx)},{_fmt(cy - 3)} L{_fmt(cx + 3)},'
                f'{_fmt(cy + 2.5)} L{_fmt(cx - 3)},{_fmt(cy + 2.5)} Z"/>'
            )
    if points and points[-1].value is not None and points[-1].status not in BREACHING:
        out.append(
            f'<circle class="mark ok" cx="{_fmt(scale.x(points[-1].window_end))}"'
            f' cy="{_fmt(scale.y(points[-1].value))}" r="2"/>'
        )
    out.append("</svg>")
    return Markup("".join(out))
