"""A real browser loads the page: headless Chromium, from a file and from the daemon's server.

Needs the Debian packages `chromium` and `chromium-driver` (`make browser`
installs them; `make test` never does); skipped, saying so, when Chromium is not there.
Screenshots land in test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.pages import known_history, known_report, parse
from watchdog.core.settings import settings_from_mapping
from watchdog.daemon.web import make_app, serve
from watchdog.report.files import write_reports
from watchdog.runner.plugins import PLUGINS, default_settings

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (run `make browser`, or apt-get install chromium chromium-driver)",
    ),
]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once with its own profile directory."""
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The known report written as the daemon writes it: report.html and reports/<end>.html."""
    settings = settings_from_mapping(
        {"report": {"dir": str(tmp_path / "site")}}, plugins=PLUGINS, env={}
    )
    write_reports(
        known_report(), known_history(41), settings, now=datetime(2026, 12, 1, tzinfo=UTC)
    )
    return tmp_path / "site"


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The daemon's server for `site` on 127.0.0.1; yields its base URL."""
    app = make_app(
        site,
        status=lambda: {"runs": []},
        last_run_age=lambda: None,
        period=default_settings().schedule.period,
    )
    httpd, thread = serve("127.0.0.1:0", app)
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000  # not a blank page


def assert_rendered(dom: str) -> None:
    """The DOM Chromium built has every tile, the charts, and nothing that fetches."""
    root = parse(dom)
    assert len(root.find("li", cls="tile")) == 12
    assert len(root.find("svg", cls="chart")) == 11  # every check but the disabled one
    assert not root.find("script") and not root.find("img") and not root.find("link")
    for element in root.walk():
        for name in ("src", "href"):
            value = element.attrs.get(name, "#")
            assert not value.startswith(("http:", "https:", "//")), (element.tag, value)


def test_report_file_renders_offline(site: Path, tmp_path: Path) -> None:
    """The written file renders in Chromium: the DOM is complete and a screenshot is taken."""
    ARTIFACTS.mkdir(exist_ok=True)
    url = (site / "report.html").as_uri()
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    chromium("--window-size=1280,2200", f"--screenshot={shot}", url, profile=tmp_path / "p1")
    assert_png(shot)
    dom = chromium("--dump-dom", url, profile=tmp_path / "p2").stdout
    assert_rendered(dom)
    pdf = ARTIFACTS / "report.pdf"
    pdf.unlink(missing_ok=True)
    chromium("--no-pdf-header-footer", f"--print-to-pdf={pdf}", url, profile=tmp_path / "p3")
    assert pdf.read_bytes()[:5] == b"%PDF-"  # it prints


def test_served_page_renders(served: str, tmp_path: Path) -> None:
    """The page served by the daemon on 127.0.0.1 renders, latest and archived alike."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-served.png"
    shot.unlink(missing_ok=True)
    chromium(
        "--window-size=390,1600", f"--screenshot={shot}", f"{served}/", profile=tmp_path / "p1"
    )
    assert_png(shot)
    dom = chromium("--dump-dom", f"{served}/reports/20261128T040000Z", profile=tmp_path / "p2")
    assert_rendered(dom.stdout)


# --- through chromedriver: console errors, network requests, layout on a phone --------------


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class WebDriver:
    """The few W3C WebDriver calls this test needs, over plain HTTP to chromedriver."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = ""

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with _DIRECT.open(request, timeout=60) as response:
            return json.loads(response.read())["value"]

    def start(self, profile: Path) -> None:
        options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={profile}"]}
        capabilities = {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        }
        found = self.call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
        self.session = found["sessionId"]

    def __call__(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.call(method, f"/session/{self.session}{path}", body)

    def logs(self, kind: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self("POST", "/se/log", {"type": kind})
        return entries


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    if DRIVER is None:
        pytest.skip("chromedriver is not installed (Debian package chromium-driver)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    web = WebDriver(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if web.call("GET", "/status").get("ready"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "chromedriver did not start"
            time.sleep(0.1)
        web.start(tmp_path / "profile")
        yield web
    finally:
        with contextlib.suppress(Exception):
            web("DELETE", "")
        process.terminate()
        process.wait(10)


# The browser's own pages (its new-tab page) load from these; they are not the network.
INTERNAL = ("chrome:", "chrome-untrusted:", "about:", "devtools:")


def requested_urls(web: WebDriver) -> list[str]:
    """Every URL the page asked for, from Chromium's network log."""
    urls = []
    for entry in web.logs("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if not url.startswith(INTERNAL):
                urls.append(url)
    return urls


def test_no_console_error_and_no_request_leaves_the_page(
    driver: WebDriver, served: str, site: Path
) -> None:
    """Loaded from the server and from the file, the page logs no error and fetches nothing."""
    driver("POST", "/url", {"url": "about:blank"})
    for url in (f"{served}/", (site / "report.html").as_uri()):
        driver.logs("performance")  # drop what came before
        driver("POST", "/url", {"url": url})
        assert (
            driver("POST", "/execute/sync", {"script": "return document.readyState", "args": []})
            == "complete"
        )
        assert requested_urls(driver) == [url]
        errors = [e for e in driver.logs("browser") if e["level"] == "SEVERE"]
        assert errors == []


def test_single_column_on_a_phone(driver: WebDriver, served: str) -> None:
    """Under 600px wide, the tiles and charts stack in one column."""
    ARTIFACTS.mkdir(exist_ok=True)
    driver("POST", "/window/rect", {"width": 390, "height": 900})
    driver("POST", "/url", {"url": f"{served}/"})
    script = (
        "return [document.documentElement.clientWidth,"
        " getComputedStyle(document.querySelector('ul.tiles')).gridTemplateColumns.split(' ').length,"
        " getComputedStyle(document.querySelector('.charts')).gridTemplateColumns.split(' ').length,"
        " document.documentElement.scrollWidth <= document.documentElement.clientWidth]"
    )
    width, tiles, charts, fits = driver("POST", "/execute/sync", {"script": script, "args": []})
    assert width < 600
    assert (tiles, charts, fits) == (1, 1, True)
    shot = base64.b64decode(driver("GET", "/screenshot"))
    (ARTIFACTS / "report-phone.png").write_bytes(shot)
    driver("POST", "/window/rect", {"width": 1280, "height": 900})
    wide = driver("POST", "/execute/sync", {"script": script, "args": []})
    assert wide[1] > 1


def test_each_burn_bar_is_as_long_as_its_burn(driver: WebDriver, tmp_path: Path) -> None:
    """In the browser, a burn bar's drawn width follows its burn: a burn of 0 draws (almost)
    nothing, a burn past a tier's factor reaches past its dashed mark. The page's table bars
    (`td.bar`) must not size the SVG's bars (a CSS width overrides an SVG rect's attribute:
    every burn was drawn 28% wide, zeros included)."""
    from tests.test_slo_page import burst, page, steady, view  # the SLO pages' own builders

    clean = steady(timedelta(days=2), 100, 0)  # every burn 0
    html = tmp_path / "slos.html"
    html.write_text(page(view("observe_success", burst()), view("recall_success", clean)))
    driver("POST", "/url", {"url": html.as_uri()})
    script = (
        "return [...document.querySelectorAll('svg.burn rect')].map(r => "
        "[r.closest('svg').querySelector('title').textContent, r.dataset.window,"
        " Number(r.dataset.burn), r.getBoundingClientRect().width])"
    )
    bars = driver("POST", "/execute/sync", {"script": script, "args": []})
    assert bars
    zeros = [(window, drawn) for _, window, burn, drawn in bars if burn == 0]
    assert zeros and all(drawn < 3 for _, drawn in zeros), zeros
    widths = {(title, window): drawn for title, window, _, drawn in bars}
    burns = {(title, window): burn for title, window, burn, _ in bars}
    ordered = sorted(widths, key=lambda k: burns[k])
    drawn_in_order = [widths[k] for k in ordered]
    assert drawn_in_order == sorted(drawn_in_order)  # a higher burn is never a shorter bar
