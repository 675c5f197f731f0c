"""The HTML page on known results: parsed, not string-matched."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts import state
from alerts.lifecycle import Rules
from checks.base import Report, Status
from tests.builder import H
from tests.pages import (
    AT,
    HOSTILE_AGENTE,
    HOSTILE_SESSION,
    HOSTILE_SOURCE,
    KNOWN,
    known_history,
    known_report,
    parse,
)
from watchdog.core.links import parse_stamp, report_url, stamp
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.core.times import rfc3339
from watchdog.report.charts import MARKERS, Episode, Point, axis_top, timeline_chart, value_chart
from watchdog.report.files import prune, write_reports
from watchdog.report.history import History, load_history, replay_alerts
from watchdog.report.page import render_page, reproduce_command


def page_of(history: History | None = None, settings: Settings | None = None) -> str:
    return render_page(known_report(settings), history, settings=settings)


def test_every_check_has_a_tile_breaches_first() -> None:
    """Every check id has one tile, with the breached and errored ones first."""
    tiles = parse(page_of()).find("li", cls="tile")
    ids = [t.attrs["data-check"] for t in tiles]
    assert sorted(ids) == sorted(KNOWN)
    statuses = [t.attrs["data-status"] for t in tiles]
    first_other = next(i for i, s in enumerate(statuses) if s not in ("breached", "error"))
    assert all(s not in ("breached", "error") for s in statuses[first_other:])
    assert statuses[0] == "error"  # error ranks above breached


def test_status_is_never_colour_alone() -> None:
    """Each tile states its status by icon and by word, not only by its colour class."""
    for tile in parse(page_of()).find("li", cls="tile"):
        badge = tile.find(cls="badge")[0]
        icon = badge.find(cls="icon")[0].all_text().strip()
        word = badge.find(cls="word")[0].all_text().strip()
        assert icon and word
        assert word.lower().replace(" ", "_") == tile.attrs["data-status"]


def test_tile_shows_value_target_severity_sample_and_summary() -> None:
    """A tile carries the value against the target, the severity, sample size and summary."""
    tile = parse(page_of()).find("li", data_check="observe_failure_rate")[0]
    text = " ".join(tile.all_text().split())
    assert "12.5%" in text
    assert "breach when >= 5.0%" in text
    assert "critical" in text
    assert "sample size 64" in text
    assert "summary of observe_failure_rate <i>not markup</i>" in text


def test_header_names_window_evaluation_source_and_status() -> None:
    """The header shows the window, the evaluation time, the source and the overall status."""
    root = parse(page_of())
    header = root.find("header", cls="page")[0]
    text = " ".join(header.all_text().split())
    assert "2026-11-28T00:00:00Z .. 2026-11-28T04:00:00Z" in text
    meta = {
        dt.all_text(): dd.all_text()
        for dt, dd in zip(header.find("dt"), header.find("dd"), strict=True)
    }
    assert meta["Evaluated at"] == "2026-11-28T04:00:00Z"
    assert header.find(id="source")[0].all_text() == HOSTILE_SOURCE
    assert header.find(cls="badge")[0].attrs["data-status"] == "error"


def test_breached_check_lists_evidence_parameters_and_triage() -> None:
    """A breached check lists its evidence, the parameters defining it and the triage."""
    root = parse(page_of())
    detail = root.find("article", id="check-observe_failure_rate")[0]
    events = [li.all_text() for li in detail.find("ol", cls="evidence-events")[0].find("li")]
    assert events == ["ev-9", "ev-11"]
    params = dict(
        zip(
            [dt.all_text() for dt in detail.find("dt")],
            [dd.all_text() for dd in detail.find("dd")],
            strict=True,
        )
    )
    assert params["lost after"] == "15m without an outcome"
    assert params["min_samples"] == "20"
    assert params["counts"] == "56 completed, 5 failed, 3 lost"
    table = detail.find("table", data_dimension="outcome")[0]
    rows = [
        [td.all_text().strip() for td in tr.find("td")] for tr in table.find("tbody")[0].find("tr")
    ]
    assert rows == [["failed", "5", "62.5%"], ["lost", "3", "37.5%"]]


def test_coverage_detail_has_grace_and_session_table() -> None:
    """A coverage breach shows its grace and the failing sessions with what they missed."""
    detail = parse(page_of()).find("article", id="check-recall_coverage")[0]
    params = {
        dt.all_text(): dd.all_text()
        for dt, dd in zip(detail.find("dt"), detail.find("dd"), strict=True)
    }
    assert params["recall_grace"] == "5m after the first event"
    row = detail.find("table", cls="sessions")[0].find("tbody")[0].find("tr")[0]
    cells = [td.all_text() for td in row.find("td")]
    assert cells == [
        HOSTILE_SESSION,
        "2026-11-28T01:00:00Z",
        "2026-11-28T01:30:00Z",
        "12",
        "start recall",
    ]


def test_observe_coverage_parameters_name_idle_timeout() -> None:
    """observe_coverage is defined by observe_grace and idle_timeout."""
    report = known_report()
    checks = dict(report.checks)
    checks["observe_coverage"] = checks["recall_coverage"].__class__(
        **{**checks["observe_coverage"].__dict__, "status": Status.BREACHED, "value": 1}
    )
    page = render_page(report.__class__(**{**report.__dict__, "checks": checks}))
    detail = parse(page).find("article", id="check-observe_coverage")[0]
    names = [dt.all_text() for dt in detail.find("dt")]
    assert "idle_timeout" in names and "observe_grace" in names


def _parameters(report: Report, check_id: str, settings: Settings | None = None) -> dict[str, str]:
    """The parameters the page lists for `check_id`, which it shows as breached."""
    checks = {**report.checks}
    checks[check_id] = replace(checks[check_id], status=Status.BREACHED, value=1)
    page = render_page(replace(report, checks=checks), settings=settings)
    detail = parse(page).find("article", id=f"check-{check_id}")[0]
    return {
        dt.all_text(): dd.all_text()
        for dt, dd in zip(detail.find("dt"), detail.find("dd"), strict=True)
    }


def test_recall_before_response_is_defined_by_a_recall_before_each_answer() -> None:
    """recall_before_response reads as the recall owed after each human message, not a compaction."""
    params = _parameters(known_report(), "recall_before_response")
    assert params["recall_grace"] == (
        "5m after each non-trivial human message, or sooner at the response"
    )
    assert "observe_grace" not in params


def test_a_custom_coverage_check_names_its_own_trigger_and_grace() -> None:
    """A custom coverage check with a trigger is defined by its grace after its trigger events."""
    custom = {
        "id": "recall_after_compaction",
        "kind": "coverage",
        "trigger": ["session.compacted"],
        "required": ["memory.recall.started"],
        "until": ["message.sent"],
        "grace": "10m",
        "target": 0,
    }
    settings = settings_from_mapping({"checks": {"custom": [custom]}}, env={})
    report = known_report(settings)
    result = replace(report.checks["recall_coverage"], id="recall_after_compaction")
    report = replace(report, checks={**report.checks, result.id: result})
    params = _parameters(report, "recall_after_compaction", settings)
    assert params["grace"] == (
        "10m after each session.compacted, or sooner at the first message.sent"
    )
    assert "observe_grace" not in params and "recall_grace" not in params


def test_hostile_values_are_escaped() -> None:
    """Session ids, source names and agentes holding markup are text, never elements."""
    page = page_of()
    root = parse(page)
    assert not root.find("script")
    assert not root.find("img")
    assert not root.find("b")
    assert "<script>alert" not in page
    assert HOSTILE_SESSION in root.all_text()
    assert HOSTILE_AGENTE in root.all_text()


def test_page_is_self_contained() -> None:
    """No script, no stylesheet link, no external URL in src or href, no url() or @import."""
    page = page_of(known_history())
    root = parse(page)
    assert not root.find("script") and not root.find("link") and not root.find("iframe")
    for element in root.walk():
        for name in ("src", "href", "action", "xlink:href"):
            value = element.attrs.get(name)
            if value is not None:
                assert value.startswith("#"), (element.tag, name, value)
    assert not re.search(r"https?://", page)
    style = root.find("style")[0].all_text()
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    assert "max-width: 600px" in style  # single column on a phone
    assert "@media print" in style


def test_reproduce_line_is_the_exact_command() -> None:
    """The page says how to evaluate this window again."""
    report = known_report()
    command = parse(page_of()).find("section", id="reproduce")[0].find("code")[0].all_text()
    assert command == reproduce_command(report)
    assert command == "memory-watchdog check --at 2026-11-28T04:00:00Z --window 4h"


def test_reproduce_line_names_the_store_it_read_with_its_password_masked() -> None:
    """The command reads the same store (`--store`), never showing a password."""
    for url, shown in (
        (
            "chdb:///var/lib/memory-watchdog/demo-store",
            "chdb:///var/lib/memory-watchdog/demo-store",
        ),
        ("https://reader:s3cret@ch.example:8443/otel", "'https://reader:***@ch.example:8443/otel'"),
    ):
        settings = Settings().with_store_url(url)
        page = render_page(known_report(settings), settings=settings)
        command = parse(page).find("section", id="reproduce")[0].find("code")[0].all_text()
        assert command == (
            f"memory-watchdog check --at 2026-11-28T04:00:00Z --window 4h --store {shown}"
        )
        assert "s3cret" not in page


def test_a_tile_with_one_window_draws_no_sparkline_but_says_it_is_new() -> None:
    """A trend needs two windows: with only this one, no lone marker, and "new in this window"."""
    root = parse(page_of())
    assert not root.find("svg", cls="spark")
    tile = root.find("li", data_check="observe_failure_rate")[0]
    assert tile.find(cls="since")[0].all_text() == "new in this window"
    two = History(
        points={"observe_failure_rate": [Point(AT - timedelta(hours=4), 0.01, Status.OK)]}
    )
    tile = parse(page_of(two)).find("li", data_check="observe_failure_rate")[0]
    assert tile.find("svg", cls="spark")[0].attrs["data-points"] == "2"


def test_deviation_table_is_agente_by_tipo() -> None:
    """The deviation table has a row per agente and a column per tipo, with totals."""
    table = parse(page_of()).find("table", cls="deviations")[0]
    head = [th.all_text() for th in table.find("thead")[0].find("th")]
    assert head == ["agente", "laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario", "total"]
    rows = {
        tr.find("th")[0].all_text(): [td.all_text() for td in tr.find("td")]
        for tr in table.find("tbody")[0].find("tr")
    }
    assert rows == {"dev": ["0", "0", "1", "1"], HOSTILE_AGENTE: ["3", "0", "0", "3"]}


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


def test_error_classes_off_is_said() -> None:
    """With report.error_classes off, the page says failing items are grouped without error text."""
    settings = settings_from_mapping({"report": {"error_classes": False}}, env={})
    assert "report.error_classes = false" in parse(page_of(settings=settings)).all_text()


def test_write_reports_writes_latest_and_archive_and_prunes(tmp_path: Path) -> None:
    """Each run writes report.html and reports/<window-end>.html, keeping report.keep pages."""
    settings = settings_from_mapping({"report": {"dir": str(tmp_path), "keep": 3}}, env={})
    report = known_report()
    for k in range(5):
        moved = report.__class__(
            **{
                **report.__dict__,
                "window": report.window.__class__(
                    at=AT + k * timedelta(hours=4),
                    length=report.window.length,
                    lookback=report.window.lookback,
                ),
            }
        )
        path = write_reports(moved, History(), settings, now=datetime(2026, 12, 1, tzinfo=UTC))
    assert path == tmp_path / "reports" / "20261128T200000Z.html"
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "20261128T120000Z.html",
        "20261128T160000Z.html",
        "20261128T200000Z.html",
    ]
    latest = (tmp_path / "report.html").read_text()
    assert latest == path.read_text()
    assert "2026-11-28T20:00:00Z" in parse(latest).find("header", cls="page")[0].all_text()
    assert not list(tmp_path.rglob(".tmp-*"))


def test_prune_leaves_other_files(tmp_path: Path) -> None:
    """Pruning deletes only archived pages, oldest first."""
    for name in ("20261128T000000Z.html", "20261128T040000Z.html", "notes.html"):
        (tmp_path / name).write_text("x")
    assert [p.name for p in prune(tmp_path, 1)] == ["20261128T000000Z.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20261128T040000Z.html", "notes.html"]


def test_window_end_names() -> None:
    """A window end names its page; URLs accept the stamp or RFC 3339, nothing else."""
    assert stamp(AT) == "20261128T040000Z"
    assert parse_stamp("20261128T040000Z") == "20261128T040000Z"
    assert parse_stamp("2026-11-28T04:00:00Z") == "20261128T040000Z"
    assert parse_stamp("2026-11-28T05:00:00+01:00") == "20261128T040000Z"
    assert parse_stamp("../../etc/passwd") is None
    assert parse_stamp("2026-11-28T04:00:00") is None
    assert (
        report_url("https://watchdog.example/", AT)
        == "https://watchdog.example/reports/20261128T040000Z"
    )


def test_tile_says_since_when_a_breach_runs() -> None:
    """A breached tile names the start of the current breach; no-verdict windows do not end it."""
    t = [AT - k * timedelta(hours=4) for k in (4, 3, 2, 1)]
    statuses = [Status.OK, Status.BREACHED, Status.INSUFFICIENT_DATA, Status.BREACHED]
    history = History(
        points={
            "observe_failure_rate": [Point(m, 0.1, s) for m, s in zip(t, statuses, strict=True)]
        }
    )
    merged = history.with_report(known_report())
    replay = replay_alerts(merged, known_report(), Rules())["observe_failure_rate"]
    assert (replay.breaching_since, replay.breaching) == (t[1], 3)
    tile = parse(page_of(history)).find("li", data_check="observe_failure_rate")[0]
    assert tile.find(cls="since")[0].all_text() == "since 11-27 12:00 UTC · 3 windows"
    assert tile.find("svg", cls="spark")[0].attrs["data-points"] == "5"
    ok_tile = parse(page_of(history)).find("li", data_check="circuit_breaker")[0]
    assert not ok_tile.find(cls="since")


def _run_log_settings(store: Store) -> Settings:
    """Settings with a watchdog database of their own, its tables created."""
    settings = settings_from_mapping(
        {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}, "source": {"table": "x.events"}},
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


def test_a_no_data_alert_is_worded_on_the_page() -> None:
    """With `no_data = "alerting"`, the timeline and the episodes name a no-data alert as such."""
    settings = settings_from_mapping(
        {"checks": {"recall_injection": {"no_data": "alerting"}}}, env={}
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


def test_coverage_evidence_lists_its_sessions() -> None:
    """A coverage breach's Evidence section lists its session ids, beside the triage's table."""
    detail = parse(page_of()).find("article", id="check-recall_coverage")[0]
    sessions = detail.find("ol", cls="evidence-sessions")[0].find("li")
    assert [li.all_text() for li in sessions] == ["s-1", HOSTILE_SESSION, "s-3"]


@pytest.mark.slow
def test_demo_and_check_write_the_page(tmp_path: Path) -> None:
    """`demo` prints the path of its page; `check --format html --output` writes one."""
    store = f"chdb://{tmp_path / 'store'}"
    cli = [sys.executable, "-m", "watchdog"]
    demo = subprocess.run(
        [*cli, "demo", "--store", store, "--at", "2026-11-28T04:00:00Z"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    path = Path(demo.stdout.strip().splitlines()[-1].rpartition(": ")[2])
    assert path == tmp_path / "store-report" / "report.html"
    demo_page = parse(path.read_text())
    assert len(demo_page.find("li", cls="tile")) == 12
    assert len(demo_page.find("rect", cls="band")) >= 7  # this window's breaches, in the charts
    output = tmp_path / "check.html"
    check = subprocess.run(
        [
            *cli,
            "check",
            "--store",
            store,
            "--at",
            "2026-11-28T04:00:00Z",
            "--format",
            "html",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 1, check.stderr
    page = parse(output.read_text())
    tiles = page.find("li", cls="tile")
    assert tiles[0].attrs["data-status"] == "breached"
    triage = page.find("article", id="check-observe_failure_rate")[0].find("table", cls="triage")
    assert {t.attrs["data-dimension"] for t in triage} == {
        "outcome",
        "source",
        "component",
        "error",
    }
