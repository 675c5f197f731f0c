"""The HTML page on known results: parsed, not string-matched."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.lifecycle import Rules
from checks.base import Report, Status
from tests.pages import (
    AT,
    HOSTILE_AGENTE,
    HOSTILE_SESSION,
    HOSTILE_SOURCE,
    KNOWN,
    known_history,
    known_report,
    page_of,
    parse,
)
from tests.readme_demo import GROUP, after_make_demo, copy_of
from watchdog.core.links import parse_stamp, report_url, stamp
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.report.charts import Point
from watchdog.report.files import prune, write_reports
from watchdog.report.history import History, replay_alerts
from watchdog.report.page import render_page, reproduce_command
from watchdog.runner.plugins import PLUGINS, default_settings


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
    settings = settings_from_mapping({"checks": {"custom": [custom]}}, plugins=PLUGINS, env={})
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
    assert command == reproduce_command(report, default_settings())  # the page's default settings
    store = Path("memory-watchdog", "store").absolute()  # the default store, as a path that
    # reads the same from any directory (default_settings() leaves the data directory relative)
    assert (
        command
        == f"memory-watchdog check --at 2026-11-28T04:00:00Z --window 4h --store chdb://{store}"
    )


def test_reproduce_line_names_the_store_it_read_with_its_password_masked() -> None:
    """The command reads the same store (`--store`), never showing a password."""
    for url, shown in (
        (
            "chdb:///var/lib/memory-watchdog/demo-store",
            "chdb:///var/lib/memory-watchdog/demo-store",
        ),
        ("https://reader:s3cret@ch.example:8443/otel", "'https://reader:***@ch.example:8443/otel'"),
    ):
        settings = default_settings().with_store_url(url)
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


def test_error_classes_off_is_said() -> None:
    """With report.error_classes off, the page says failing items are grouped without error text."""
    settings = settings_from_mapping({"report": {"error_classes": False}}, plugins=PLUGINS, env={})
    assert "report.error_classes = false" in parse(page_of(settings=settings)).all_text()


def test_write_reports_writes_latest_and_archive_and_prunes(tmp_path: Path) -> None:
    """Each run writes report.html and reports/<window-end>.html, keeping report.keep pages."""
    settings = settings_from_mapping(
        {"report": {"dir": str(tmp_path), "keep": 3}}, plugins=PLUGINS, env={}
    )
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


def test_coverage_evidence_lists_its_sessions() -> None:
    """A coverage breach's Evidence section lists its session ids, beside the triage's table."""
    detail = parse(page_of()).find("article", id="check-recall_coverage")[0]
    sessions = detail.find("ol", cls="evidence-sessions")[0].find("li")
    assert [li.all_text() for li in sessions] == ["s-1", HOSTILE_SESSION, "s-3"]


@pytest.mark.slow
@GROUP
def test_demo_and_check_write_the_page(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """`demo` prints the path of its page; `check --format html --output` writes one."""
    done = after_make_demo(tmp_path_factory)  # the README's demo, on WATCHDOG_STORE_URL's store
    store = done.home / ".local/share/memory-watchdog/demo-store"
    path = Path(done.readme_block.stdout.strip().splitlines()[-1].rpartition(": ")[2])
    assert path == store.parent / "demo-store-report" / "report.html"
    demo_page = parse(path.read_text())
    assert len(demo_page.find("li", cls="tile")) == 12
    assert len(demo_page.find("rect", cls="band")) >= 7  # this window's breaches, in the charts
    env = copy_of(done, tmp_path / "home")  # check on a store of its own
    output = tmp_path / "check.html"
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "watchdog",
            "check",
            "--store",
            f"chdb://{tmp_path}/home/.local/share/memory-watchdog/demo-store",
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
        env=env,
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
