"""The page's error budgets: a tile per SLO, the burndown and the burns per tier, parsed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from alerts.rows import SloBucketRow
from alerts.state import ensure_schema, save_buckets
from checks.base import SloReport, SloSpec
from checks.builtin import configured_checks
from checks.slo.budget import Bucket, figures
from checks.slo.specs import slo_specs
from tests.alerts.conftest import make_settings
from tests.pages import AT, known_report, parse
from watchdog.core.store import Store
from watchdog.report.page import render_page
from watchdog.report.slo_page import SloView, burndown, slo_views
from watchdog.runner.plugins import default_settings

BUCKET = timedelta(minutes=5)


def spec(name: str) -> SloSpec:
    settings = default_settings()
    return {s.name: s for s in slo_specs(settings, configured_checks(settings))}[name]


def steady(span: timedelta, good: int, bad: int, end: timedelta = timedelta(0)) -> list[Bucket]:
    """Every bucket of `[AT - end - span, AT - end)` with `good` and `bad` events."""
    last = AT - end
    return [Bucket(last - (i + 1) * BUCKET, good, bad) for i in range(span // BUCKET)]


def view(name: str, buckets: list[Bucket]) -> SloView:
    found = spec(name)
    return SloView(found, figures(found.params, buckets, AT), buckets)


def burst() -> list[Bucket]:
    """Two clean days, then the last hour at a fifth failures: page-fast fires."""
    hour = {b.start for b in steady(timedelta(hours=1), 0, 0)}
    return [
        Bucket(b.start, 80, 20) if b.start in hour else b for b in steady(timedelta(days=2), 100, 0)
    ]


def page(*views: SloView) -> str:
    return render_page(known_report(), settings=default_settings(), slos=views)


def test_each_slo_has_a_budget_tile() -> None:
    """Every SLO given has one tile saying its status, budget left, objective and exhaustion."""
    doc = parse(page(view("observe_success", burst()), view("recall_success", [])))
    tiles = doc.find("li", cls="budget")
    assert [t.attrs["data-slo"] for t in tiles] == ["observe_success", "recall_success"]
    observe = " ".join(tiles[0].all_text().split())
    assert tiles[0].attrs["data-status"] == "ok"
    assert "58.3% of the budget left" in observe
    assert "objective 99.0% over 30d" in observe and "page-fast firing" in observe
    assert "at the 6h burn" in observe
    recall = " ".join(tiles[1].all_text().split())
    assert tiles[1].attrs["data-status"] == "no_data"
    assert "No data" in recall and "— of the budget left" in recall


def test_the_reports_own_slos_are_drawn_without_a_burndown() -> None:
    """Rendered without views, the page shows the report's SLOs: tiles, burns, no burndown."""
    shown = view("observe_success", burst())
    report = replace(known_report(), slos={"observe_success": SloReport(shown.spec, shown.figures)})
    doc = parse(render_page(report, settings=default_settings()))
    assert [t.attrs["data-slo"] for t in doc.find("li", cls="budget")] == ["observe_success"]
    assert doc.find("figure", id="burn-observe_success")
    assert doc.find("figure", id="burndown-observe_success") == []


def test_slo_views_read_the_ledger_of_the_period(store: Store) -> None:
    """`slo_views` gives each of the report's SLOs the judged buckets of its period."""
    settings = make_settings()
    shown = view("observe_success", burst())
    source = settings.source.display_name
    rows = [SloBucketRow(source, "observe_success", b.start, b.good, b.bad, AT) for b in burst()]
    rows.append(SloBucketRow(source, "observe_success", AT - timedelta(days=31), 5, 5, AT))
    ensure_schema(store, settings)
    save_buckets(store, settings, rows)
    report = replace(known_report(), slos={"observe_success": SloReport(shown.spec, shown.figures)})
    (found,) = slo_views(store, settings, report)
    assert found.buckets is not None
    assert sorted(found.buckets, key=lambda b: b.start) == sorted(burst(), key=lambda b: b.start)


def test_no_slo_section_without_slos() -> None:
    """A page rendered without SLO figures has no error budget section."""
    assert parse(page()).find("section", id="slos") == []


def test_the_burndown_has_a_point_per_hour_ending_at_the_tiles_remaining() -> None:
    """The burndown has a point per hour of the period; its last is the figures' remaining."""
    shown = view("observe_success", burst())
    points = burndown(shown)
    assert len(points) == 30 * 24 + 1 and points[-1].window_end == AT
    assert shown.figures.budget is not None
    assert points[-1].value == pytest.approx(shown.figures.budget.remaining)
    assert points[0].value is None  # 30 days back: no judged bucket before it


def test_each_burndown_point_is_the_figures_remaining_at_its_time() -> None:
    """At every hour, the burndown equals `figures` computed at that hour."""
    shown = view("observe_success", burst())
    for point in burndown(shown)[-60:]:
        at = figures(shown.spec.params, shown.buckets, point.window_end)
        expected = None if at.budget is None else at.budget.remaining
        assert point.value == pytest.approx(expected)


def test_the_burndown_chart_is_drawn() -> None:
    """The page draws the burndown as a chart with the period's points and a 0 line."""
    doc = parse(page(view("observe_success", burst())))
    figure = doc.find("figure", id="burndown-observe_success")[0]
    svg = figure.find("svg")[0]
    assert svg.attrs["data-points"] == str(30 * 24 + 1)
    assert figure.find("line", cls="target")[0].attrs["data-target"] == "0.0"


def test_the_burn_chart_shows_each_tier_against_its_factor() -> None:
    """Each tier has its factor mark and a bar per window holding events, over or under it."""
    doc = parse(page(view("observe_success", burst())))
    svg = doc.find("figure", id="burn-observe_success")[0].find("svg")[0]
    factors = [float(line.attrs["data-factor"]) for line in svg.find("line", cls="target")]
    assert factors == pytest.approx([14.4, 6.0, 3.0, 1.0])
    bars = svg.find("rect", cls="bar")
    assert len(bars) == 8
    over = {(b.attrs["data-window"], "over" in b.classes) for b in bars[:2]}
    assert over == {("1h", True), ("5m", True)}


def test_a_window_without_events_has_no_bar_and_says_no_data() -> None:
    """A burn that is null draws no bar (never a zero-length one) and reads "no data"."""
    late = [Bucket(b.start, b.good, b.bad) for b in steady(timedelta(hours=1), 100, 0, H6)]
    doc = parse(page(view("observe_success", late)))
    svg = doc.find("figure", id="burn-observe_success")[0].find("svg")[0]
    windows = [b.attrs["data-window"] for b in svg.find("rect", cls="bar")]
    assert windows == ["1d", "3d"]  # the events lie 6-7h back: only the day windows hold them
    assert "5m no data" in svg.all_text()


H6 = timedelta(hours=6)
