"""The shipped Prometheus rules, and the daemon's /metrics as promtool reads them.

`config/prometheus/memory-watchdog.rules.yml` passes `promtool check rules`
and its unit tests (`promtool test rules`: series in, alerts out), and every
metric it names is one the daemon serves; a live `/metrics` scrape (a daemon
in this process, one window judged) passes `promtool check metrics`. Skipped,
saying how to get it, when promtool is not installed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from alerts.testing import RecordingNotifier
from tests.builder import T0, H, M, Scenario
from tests.ingest.conftest import ingest_settings
from watchdog.core.schedule import Schedule
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.ingest.metrics import IngestCollector
from watchdog.daemon.ingest.service import Ingest
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.service import Daemon, Running
from watchdog.daemon.serving import Serving
from watchdog.daemon.spool import Spool
from watchdog.daemon.systemd import Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.runner.plugins import PLUGINS

RULES = Path(__file__).parents[2] / "config" / "prometheus" / "memory-watchdog.rules.yml"
RULE_TESTS = RULES.with_name("memory-watchdog.rules.test.yml")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("needs promtool: apt-get install prometheus (.ci/run installs it)")
    return found


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def scrape(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of a daemon that judged one window (on the wall clock's terms: its own)."""
    scenario = Scenario()
    scenario.session("s1").starts(T0 + 10 * M).recalls(T0 + 11 * M).ends(T0 + 40 * M)
    table = f"p_{uuid.uuid4().hex[:10]}.otel_events"
    scenario.write(store, table)
    settings = settings_from_mapping(
        {
            "store": {"database": f"wd_{uuid.uuid4().hex[:12]}"},
            "source": {"table": table},
            "schedule": {"every": "1h", "delay": "2m"},
        },
        plugins=PLUGINS,
        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("xdg"))},
    )
    now = T0 + 2 * H + 2 * M

    def clock() -> datetime:
        return now

    chat = RecordingNotifier(name="slack")
    daemon = Daemon(
        settings,
        schedule=Schedule.from_settings(settings.schedule),
        spool=Spool.for_settings(settings),
        outputs=Outputs(
            Telemetry(source=settings.source.display_name),
            Metrics(CollectorRegistry(), source=table, version="9.9.9", receivers=["slack"]),
            Notify(),
        ),
        notifiers={"slack": chat},
        running=Running(
            clock=clock, open_store_fn=lambda _: contextlib.nullcontext(store), pages=False
        ),
        serving=Serving(http="127.0.0.1:0"),
    )
    server = daemon.serve_http()
    assert server is not None
    daemon.tick()
    host, port = server.server_address[:2]
    with urllib.request.urlopen(f"http://{host!s}:{port}/metrics", timeout=30) as response:
        body = response.read().decode()
    server.shutdown()
    server.server_close()
    yield body


def test_the_shipped_rules_pass_promtool_check_rules() -> None:
    """`promtool check rules` on config/prometheus/memory-watchdog.rules.yml."""
    checked = run_promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {RULES.read_text().count('- alert:')} rules found" in checked.stdout


def test_the_shipped_rules_pass_their_unit_tests() -> None:
    """`promtool test rules`: each rule fires on the series that should fire it, and only then."""
    tested = run_promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_live_metrics_scrape_passes_promtool_check_metrics(scrape: str) -> None:
    """The daemon's /metrics after a judged window, as Prometheus' own linter reads it."""
    checked = run_promtool("check", "metrics", stdin=scrape)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "memory_watchdog_check_status{" in scrape  # a run's metrics were there to check


def test_every_metric_the_rules_name_is_one_the_daemon_serves(
    scrape: str, store: Store, tmp_path: Path
) -> None:
    """The rules and the exporter agree on names (the OTLP receiver's too, which `daemon
    --otlp` serves beside them): a renamed metric fails here, not at 3 a.m."""
    served = {s.name for f in text_string_to_metric_families(scrape) for s in f.samples}
    receiver = Ingest(
        ingest_settings(tmp_path), open_fn=lambda request: contextlib.nullcontext(store)
    )
    served |= {s.name for family in IngestCollector(receiver).collect() for s in family.samples}
    named = set(re.findall(r"\bmemory_watchdog_[a-z_]+", RULES.read_text(encoding="utf-8")))
    assert named and named <= served, named - served
