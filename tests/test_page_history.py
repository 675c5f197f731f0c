"""The page's history: its charts, alert timeline and episodes, replayed from the run log."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

from alerts import state
from alerts.lifecycle import Rules
from checks.base import Report, Status
from tests.builder import H
from tests.pages import (
    AT,
    known_history,
    known_report,
    page_of,
    parse,
)
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.core.times import rfc3339
from watchdog.report.charts import MARKERS, Episode, Point, axis_top, timeline_chart, value_chart
from watchdog.report.history import History, load_history, replay_alerts
from watchdog.report.page import render_page
from watchdog.runner.plugins import PLUGINS


def test_chart_points_equal_history_values() -> None:
    """The chart's markers carry exactly the history's values, with this run's value last."""
    history = known_history(6)
    figure = parse(page_of(history)).find("figure", data_check="observe_failure_rate")[0]
    marks = figure.find(cls="mark")
    expected = [p.value for p in history.points["observe_failure_rate"]] + [0.125]
    assert [float(m.attrs["data-value"]) for m in marks] == expected
    breached = [m.attrs["data-window-end"] for m in marks if "breach" in m.classes]
    assert breached == ["2026-11-27T04:00:00Z", "2026-11-27T16:00:00Z", "2026-11-28T04:00:00Z"]
    assert len(figure.find("rect", cls="band")) == 3
    target = figure.find("line", cls="target")[0]
    assert float(target.attrs["data-target"]) == 0.05


def test_history_is_capped_to_its_window_count() -> None:
    """With this run merged in, the chart keeps the last `windows` points."""
    history = History(
        points={
            "circuit_breaker": [
                Point(AT - k * timedelta(hours=4), k, Status.OK) for k in range(1, 60)
            ]
        },
        windows=42,
    ).with_report(known_report())
    assert len(history.points["circuit_breaker"]) == 42
    assert history.points["circuit_breaker"][-1].window_end == AT


def test_chart_with_one_point_is_readable() -> None:
    """A single point is drawn as one marker with axis labels and a target."""
    svg = value_chart([Point(AT, 2, Status.OK)], target=3, unit="count", title="one")
    root = parse(str(svg))
    assert len(root.find(cls="mark")) == 1
    assert not root.find("polyline")
    ticks = [t.all_text() for t in root.find("text", cls="tick")]
    assert "0" in ticks and "11-28 04:00" in ticks
    assert root.find("text", cls="unit")[0].all_text() == "count"


def test_chart_with_500_points_stays_light() -> None:
    """500 points: one line of 500 vertices, no per-point markers, breached windows ticked."""
    points = [
        Point(
            AT - k * timedelta(hours=4),
            float(k % 7) * 100,
            Status.BREACHED if k % 50 == 0 else Status.OK,
        )
        for k in range(500)
    ]
    points.reverse()
    svg = str(value_chart(points, target=3000, unit="ms", title="many"))
    root = parse(svg)
    lines = root.find("polyline")
    assert len(lines) == 1 and len(lines[0].attrs["points"].split()) == 500
    assert not root.find("circle") and len(points) > MARKERS
    assert len(root.find(cls="tick-mark")) == 10
    assert len(root.find("rect", cls="band")) == 10
    assert len(svg) < 40_000
    assert root.find("text", cls="unit")[0].all_text() == "ms"


def test_chart_breaks_the_line_at_windows_without_a_value() -> None:
    """A window with no value is a gap, not a zero."""
    points = [
        Point(AT - timedelta(hours=8), 1, Status.OK),
        Point(AT - timedelta(hours=4), None, Status.NO_DATA),
        Point(AT, 2, Status.OK),
        Point(AT + timedelta(hours=4), 3, Status.OK),
    ]
    root = parse(str(value_chart(points, target=5, unit="count", title="gap")))
    assert [len(p.attrs["points"].split()) for p in root.find("polyline")] == [2]
    assert len(root.find(cls="mark")) == 3


def test_axis_units() -> None:
    """Axis labels carry the unit: % for ratios, ms, time for seconds, plain counts."""
    for unit, value, label in (("ratio", 0.07, "%"), ("ms", 4200, "ms"), ("s", 16000, "seconds")):
        root = parse(
            str(value_chart([Point(AT, value, Status.OK)], target=1, unit=unit, title="u"))
        )
        assert root.find("text", cls="unit")[0].all_text() == label
    assert axis_top(16000, "s") == 21600
    assert axis_top(0.07, "ratio") == 0.1


def test_alert_timeline_replays_the_lifecycle() -> None:
    """Episodes are alerts.lifecycle.advance over the runs: breached fires, ok resolves, others keep."""
    t = [AT + k * timedelta(hours=4) for k in range(6)]
    statuses = [
        Status.OK,
        Status.BREACHED,
        Status.NO_DATA,
        Status.OK,
        Status.ERROR,
        Status.BREACHED,
    ]
    history = History(
        points={"circuit_breaker": [Point(m, 1, s) for m, s in zip(t, statuses, strict=True)]}
    )
    found = replay_alerts(history, known_report(), Rules())["circuit_breaker"].episodes
    assert found == (Episode("circuit_breaker", t[1], t[3]), Episode("circuit_breaker", t[4], None))
    pending = replay_alerts(history, known_report(), Rules(pending_runs=2))["circuit_breaker"]
    assert pending.episodes == (Episode("circuit_breaker", t[5], None),)
    root = parse(str(timeline_chart(found, start=t[0], end=t[5], title="alerts")))
    assert [r.attrs["class"] for r in root.find("rect")] == ["span resolved", "span firing"]


def test_page_lists_alert_episodes() -> None:
    """The alert timeline lists when each alert fired and resolved."""
    table = parse(page_of(known_history(6))).find("table", cls="episodes")[0]
    rows = [[td.all_text() for td in tr.find("td")] for tr in table.find("tbody")[0].find("tr")]
    assert rows[0] == ["observe_failure_rate", "2026-11-27T04:00:00Z", "2026-11-27T08:00:00Z"]
    assert rows[-1] == ["observe_failure_rate", "2026-11-27T16:00:00Z", "2026-11-27T20:00:00Z"]


def _run_log_settings(store: Store) -> Settings:
    """Settings with a watchdog database of their own, its tables created."""
    settings = settings_from_mapping(
        {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}, "source": {"table": "x.events"}},
        plugins=PLUGINS,
        env={},
    )
    state.ensure_schema(store, settings)
    return settings


def _record(store: Store, settings: Settings, report: Report) -> None:
    """Put `report` in the run log as the alert pipeline would."""
    state.record_run(
        store,
        settings,
        source=settings.source.display_name,
        window=report.window,
        now=report.window.at,
        status=report.status.value,
        checks=state.check_results_json(report),
    )


def _observe_failure_rate_at(k: int, value: float) -> Report:
    """known_report moved k windows back, with observe_failure_rate at `value`."""
    earlier = known_report()
    window = replace(earlier.window, at=AT - k * timedelta(hours=4))
    result = replace(
        earlier.checks["observe_failure_rate"],
        value=value,
        status=Status.BREACHED if value >= 0.05 else Status.OK,
    )
    return replace(earlier, window=window, checks={**earlier.checks, result.id: result})


def test_history_comes_from_the_run_log(store: Store) -> None:
    """load_history reads each check's points from the run log and adds this report last."""
    settings = _run_log_settings(store)
    values = [0.02, 0.09, 0.01]
    for k, value in enumerate(values):
        _record(store, settings, _observe_failure_rate_at(3 - k, value))
    history = load_history(store, settings, known_report())
    series = history.points["observe_failure_rate"]
    assert [p.value for p in series] == [*values, 0.125]
    assert [(p.window_end, p.recorded) for p in series][-1] == (AT, False)
    replays = replay_alerts(history, known_report(), Rules.of(settings.alerts))
    assert replays["observe_failure_rate"].episodes == (
        Episode("observe_failure_rate", AT - 8 * H, AT - 4 * H),
    )


def test_history_charts_only_windows_of_the_reports_length(store: Store) -> None:
    """A run log holding 1h and 24h windows (a `check --window 24h --notify`) among the 4h ones
    charts the 4h windows only: the values of other lengths are not comparable on one axis."""
    settings = _run_log_settings(store)
    for k, value in enumerate([0.02, 0.09, 0.01]):
        _record(store, settings, _observe_failure_rate_at(3 - k, value))
    for k, length, value in ((2, H, 0.5), (1, 24 * H, 0.3)):  # ending 2h after a 4h window
        other = _observe_failure_rate_at(k, value)
        window = replace(other.window, at=other.window.at + 2 * H, length=length)
        _record(store, settings, replace(other, window=window))
    history = load_history(store, settings, known_report())
    series = history.points["observe_failure_rate"]
    assert [p.value for p in series] == [0.02, 0.09, 0.01, 0.125]


def test_a_no_data_alert_is_worded_on_the_page() -> None:
    """With `no_data = "alerting"`, the timeline and the episodes name a no-data alert as such."""
    settings = settings_from_mapping(
        {"checks": {"recall_injection": {"no_data": "alerting"}}}, plugins=PLUGINS, env={}
    )
    t = [AT - k * timedelta(hours=4) for k in (3, 2, 1)]
    history = History(
        points={"recall_injection": [Point(m, None, Status.NO_DATA) for m in t]},
    )
    root = parse(render_page(known_report(settings), history, settings=settings))
    table = root.find("table", cls="episodes")[0]
    rows = [[td.all_text() for td in tr.find("td")] for tr in table.find("tbody")[0].find("tr")]
    assert rows == [["recall_injection (no data)", rfc3339(t[0]), "still firing"]]
    (span,) = root.find("rect", cls="span")
    assert "recall_injection (no data): fired" in span.all_text()


def test_read_only_page_fires_no_alert_for_its_own_evaluation(store: Store) -> None:
    """`check --format html` is not run through the alert pipeline: its breaches are not "still firing"."""
    settings = _run_log_settings(store)
    report = known_report()
    root = parse(render_page(report, load_history(store, settings, report), settings=settings))
    alerts = root.find("section", id="alerts")[0]
    assert not alerts.find("table", cls="episodes")
    assert "still firing" not in alerts.all_text()
    assert "no alert in this period" in alerts.all_text()
    assert "not in the run log" in alerts.find(cls="alerts-note")[0].all_text()
    tile = root.find("li", data_check="observe_failure_rate")[0]
    assert tile.find(cls="since")[0].all_text() == "new in this window"


def test_recorded_run_fires_on_the_page_as_in_chat(store: Store) -> None:
    """A window the alert pipeline recorded (the daemon's page) fires its breaches on the timeline."""
    settings = _run_log_settings(store)
    _record(store, settings, _observe_failure_rate_at(1, 0.01))
    report = known_report()
    _record(store, settings, report)
    root = parse(render_page(report, load_history(store, settings, report), settings=settings))
    table = root.find("table", cls="episodes")[0]
    rows = [[td.all_text() for td in tr.find("td")] for tr in table.find("tbody")[0].find("tr")]
    assert ["observe_failure_rate", "2026-11-28T04:00:00Z", "still firing"] in rows
    assert not root.find(cls="alerts-note")
