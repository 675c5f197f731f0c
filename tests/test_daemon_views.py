"""The daemon's views: `status` and its dead man's switch, and `--http` (/healthz, /status, the pages)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.builder import H, M
from tests.daemon_rig import (
    DELAY,
    Rig,
    end,
    new_rig,
    outage,
    write_source,
)
from watchdog.core import jsontext
from watchdog.core.store import Store
from watchdog.core.times import rfc3339
from watchdog.daemon.service import Daemon
from watchdog.daemon.status import render_text


@pytest.fixture(scope="module")
def source(store: Store) -> str:
    return write_source(store)


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


@pytest.fixture
def make_rig(store: Store, source: str, slack: SlackStandIn, tmp_path: Path) -> Callable[..., Rig]:
    """Hourly windows judged 2m after they end; freshness target 10m; Slack at the stand-in."""
    return lambda **schedule: new_rig(store, source, slack, tmp_path, **schedule)


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


@pytest.fixture
def daemon_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The daemon's log lines so far."""
    caplog.set_level(logging.INFO, logger="watchdog")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]


# ---- status and its dead man's switch -----------------------------------------------------


def test_status_max_age_trips_with_no_run_passes_when_fresh_and_trips_when_old(rig: Rig) -> None:
    """--max-age: no completed run trips; the run 2m ago passes 1h; 3h later it trips 2h."""
    assert rig.status().staleness(H) == "no completed run"
    rig.tick(rig.daemon(), end(5) + DELAY)
    fresh = rig.status()
    assert fresh.staleness(H) is None
    text = render_text(fresh)
    assert f"Last completed run: window ending {rfc3339(end(5))} (2m ago)" in text
    assert "telemetry_freshness (critical)" in text  # the firing alert
    rig.clock.now = end(8)
    assert rig.status().staleness(2 * H) == "last completed 3h ago"


def test_status_in_an_outage_shows_the_spool_and_ages_the_last_good_run(rig: Rig) -> None:
    """Spooled error runs are not completed runs: the switch ages the last judged window."""
    outage(rig)
    status = rig.status()
    assert status.last_completed == end(5)
    assert status.staleness(H) == "last completed 2h2m ago"
    assert status.to_json()["spool"] == {"error_runs": 2, "since": rfc3339(end(6))}
    assert (
        f"Store outage: 2 error run(s) since {rfc3339(end(6))} wait in the local spool"
        in render_text(status)
    )


# ---- http ---------------------------------------------------------------------------------


@contextmanager
def serving_http(rig: Rig) -> Iterator[tuple[Daemon, Callable[[str], tuple[int, Any]]]]:
    """A daemon serving http on a free loopback port, and a GET returning (code, body)."""
    daemon = rig.daemon(http="127.0.0.1:0", pages=True)
    server = daemon.serve_http()
    assert server is not None
    host, port = server.server_address[:2]

    def get(path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://{host!s}:{port}{path}", timeout=30) as response:
                code, body = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            code, body = exc.code, exc.read().decode()
        is_json = path in ("/healthz", "/status")
        return code, json.loads(body) if is_json else body

    try:
        yield daemon, get
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def http(rig: Rig) -> Iterator[tuple[Daemon, Callable[[str], tuple[int, Any]]]]:
    with serving_http(rig) as served:
        yield served


def test_healthz_ages_the_last_run_by_the_daemon_clock(
    rig: Rig, http: tuple[Daemon, Callable[[str], tuple[int, Any]]]
) -> None:
    """/healthz: 503 before any run; 200 two minutes after the window; 503 at two periods."""
    daemon, get = http
    assert get("/healthz") == (
        503,
        {
            "status": "no_run",
            "last_run_age_s": None,
            "max_age_s": 7200.0,
            "problem": "no run recorded yet",
        },
    )
    rig.tick(daemon, end(5) + DELAY)
    assert get("/healthz") == (200, {"status": "ok", "last_run_age_s": 120.0, "max_age_s": 7200.0})
    rig.clock.now = end(7)
    code, body = get("/healthz")
    assert (code, body["status"], body["last_run_age_s"]) == (503, "stale", 7200.0)


def test_http_serves_the_latest_page_and_the_status_document(
    rig: Rig, http: tuple[Daemon, Callable[[str], tuple[int, Any]]]
) -> None:
    """/ is the page of the window just judged; /status the runs, alerts and spool as of now."""
    daemon, get = http
    rig.tick(daemon, end(5) + DELAY)
    code, page = get("/")
    assert code == 200 and "<html" in page.lower() and rfc3339(end(5))[:10] in page
    code, document = get("/status")
    assert code == 200
    assert [(r["window"]["start"], r["window"]["end"]) for r in document["runs"]] == [
        (rfc3339(end(4)), rfc3339(end(5)))
    ]
    assert [a["check"] for a in document["firing_alerts"]] == ["telemetry_freshness"]
    assert document["spool"] == {"error_runs": 0, "since": None}


def test_status_is_computed_when_asked_and_is_the_commands_document(
    rig: Rig, http: tuple[Daemon, Callable[[str], tuple[int, Any]]]
) -> None:
    """/status ages between runs as /healthz does, and is what `status --format json` prints
    then, of the store as the last run read it (`store_read_at`)."""
    daemon, get = http
    rig.tick(daemon, end(5) + DELAY)
    _, first = get("/status")
    rig.clock.now = end(5) + DELAY + 15 * M  # no run in between
    code, later = get("/status")
    assert code == 200
    assert (first["age_s"], later["age_s"]) == (120.0, 1020.0)
    assert later["now"] == rfc3339(rig.clock.now)
    assert later["store_read_at"] == rfc3339(end(5) + DELAY)
    command = json.loads(jsontext.dumps(rig.status().to_json()))
    assert command["store_read_at"] == later["now"]
    assert {**later, "store_read_at": later["now"]} == command


def test_healthz_says_when_a_run_is_overdue(make_rig: Callable[..., Rig]) -> None:
    """Every 4h: the window ending 4:00 judged at 4:02; nothing judged by 8:02 (its run due)
    plus the time a run may take (the tick timeout and its margin, at most a period): 503
    `overdue`, naming the run due, though the last run is younger than two periods."""
    rig = make_rig(every="4h")
    with serving_http(rig) as (daemon, get):
        rig.tick(daemon, end(4) + DELAY)
        assert get("/healthz")[0] == 200
        grace = min(daemon.stuck_after, 4 * H)
        rig.clock.now = end(8) + DELAY + grace - M
        assert get("/healthz")[0] == 200  # late, within what a run may take
        rig.clock.now = end(8) + DELAY + grace + M
        code, body = get("/healthz")
    assert (code, body["status"]) == (503, "overdue"), body
    assert body["problem"] == (
        f"the run due at {rfc3339(end(8) + DELAY)} has not finished"
        f" {(grace + M).total_seconds():.0f}s later (a run may take"
        f" {grace.total_seconds():.0f}s)"
    )
    assert body["last_run_age_s"] < body["max_age_s"]
