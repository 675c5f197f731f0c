"""Charts and the page render any finite value: the extremes of every numeric type."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from xml.etree import ElementTree

import pytest

from checks.base import Status
from checks.verdict import format_value
from tests.pages import AT, known_report
from watchdog.report.charts import Point, sparkline, tick_label, value_chart
from watchdog.report.history import History
from watchdog.report.page import render_page
from watchdog.report.text import render_json

EXTREMES = [
    0.0,
    sys.float_info.min,  # the smallest normal float
    5e-324,  # the smallest subnormal
    sys.float_info.max,  # 1.7976931348623157e308
    -sys.float_info.max,
    float(2**63 - 1),  # Int64
    float(-(2**63)),
    float(2**64 - 1),  # UInt64
    float(2**32 - 1),  # UInt32 (duration_ms)
    -1.0,
]
UNITS = ["count", "ratio", "ms", "s"]
T0 = datetime(2026, 11, 28, tzinfo=UTC)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _coordinates(svg: str) -> list[float]:
    """Every number in the SVG's geometry attributes."""
    root = ElementTree.fromstring(svg)
    found = []
    for element in root.iter():
        for name in (
            "x",
            "y",
            "x1",
            "x2",
            "y1",
            "y2",
            "cx",
            "cy",
            "width",
            "height",
            "points",
            "d",
        ):
            if name in element.attrib:
                found += [float(n) for n in _NUMBER.findall(element.attrib[name])]
    return found


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("value", EXTREMES)
def test_a_chart_of_any_finite_value_renders_with_finite_coordinates(
    unit: str, value: float
) -> None:
    """The value chart and the sparkline draw any finite value, alone or beside ordinary ones."""
    for series in ([value], [1.0, value, 2.0]):
        points = [
            Point(T0 + timedelta(hours=4 * i), v, Status.BREACHED if i == 1 else Status.OK)
            for i, v in enumerate(series)
        ]
        for svg in (
            value_chart(points, target=3.0, unit=unit, title="t"),
            sparkline(points, target=3.0, unit=unit, title="t"),
        ):
            numbers = _coordinates(str(svg))
            assert numbers and all(abs(n) < 1e6 for n in numbers), str(svg)[:300]
            assert "inf" not in str(svg) and "nan" not in str(svg)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("value", EXTREMES)
def test_a_tick_label_of_any_finite_value_is_a_finite_number(unit: str, value: float) -> None:
    """Labels never say inf or nan, whatever the value."""
    label = tick_label(value, unit)
    assert label and "inf" not in label and "nan" not in label


@pytest.mark.parametrize(
    "value", [sys.float_info.max, -sys.float_info.max, 5e-324, float(2**64 - 1)]
)
def test_the_page_renders_extreme_values_in_every_check_and_its_history(value: float) -> None:
    """A stored 1.7976931348623157e308 latency never crashes the page, now or in later windows."""
    report = known_report()
    checks = {
        check_id: replace(result, value=value, status=Status.BREACHED)
        for check_id, result in report.checks.items()
    }
    report = replace(report, checks=checks)
    points = {
        check_id: [Point(AT - timedelta(hours=4 * k), value, Status.BREACHED) for k in (2, 1)]
        for check_id in checks
    }
    page = render_page(report, History(points=points, windows=42))
    assert (
        "inf%" not in page
        and ">inf" not in page
        and "nan" not in page.lower().replace("nanosecond", "")
    )
    for result in checks.values():
        shown = format_value(result, result.value)
        assert "inf" not in shown and len(shown) < 40


def test_a_millisecond_axis_keeps_one_unit_for_all_its_ticks() -> None:
    """A p95 axis topping at 10 s says `0 s, 5 s, 10 s`, never `5000 ms` beside `10 s`."""
    points = [Point(T0 + timedelta(hours=4 * i), v, Status.OK) for i, v in enumerate((900, 9000))]
    svg = str(value_chart(points, target=3000, unit="ms", title="p95"))
    ticks = [
        text.text
        for text in ElementTree.fromstring(svg).iter("text")
        if text.get("class") == "tick" and text.text and text.text[0].isdigit()
    ]
    units = {label.split()[-1] for label in ticks if label.endswith(("ms", " s"))}
    assert units == {"s"}, ticks


def test_json_never_carries_nan_or_infinity() -> None:
    """A non-finite value anywhere leaves as null: every JSON output parses strictly."""
    report = known_report()
    checks = dict(report.checks)
    checks["recall_latency_p95"] = replace(checks["recall_latency_p95"], value=float("nan"))
    checks["circuit_breaker"] = replace(checks["circuit_breaker"], value=float("inf"))
    text = render_json(replace(report, checks=checks))

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON")

    document = json.loads(text, parse_constant=refuse)
    assert document["checks"]["recall_latency_p95"]["value"] is None
    assert document["checks"]["circuit_breaker"]["value"] is None
