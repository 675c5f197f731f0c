"""What the tests of the shipped Prometheus rules and Grafana dashboard share: promtool, and the
daemon's real /metrics after one judged window, with every series name it serves."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
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


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("needs promtool: apt-get install prometheus (.ci/run installs it)")
    return found


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def scrape_after_a_run(store: Store, tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of a daemon that judged one window (on the wall clock's terms: its own), as
    `daemon --http` builds it: the process collector and the daemon's metrics on one registry."""
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

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    chat = RecordingNotifier(name="slack")
    daemon = Daemon(
        settings,
        schedule=Schedule.from_settings(settings.schedule),
        spool=Spool.for_settings(settings),
        outputs=Outputs(
            Telemetry(source=settings.source.display_name),
            Metrics(registry, source=table, version="9.9.9", receivers=["slack"]),
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
    return body


def served_names(scrape: str, store: Store, tmp_path: Path) -> set[str]:
    """Every series name of the scrape, and the OTLP receiver's (`daemon --otlp` serves them
    beside the daemon's); a family with no series yet counts by the name its series will have."""
    served = {s.name for f in text_string_to_metric_families(scrape) for s in f.samples}
    receiver = Ingest(
        ingest_settings(tmp_path), open_fn=lambda request: contextlib.nullcontext(store)
    )
    for family in IngestCollector(receiver).collect():
        served |= {s.name for s in family.samples}
        if not family.samples:  # declared, no series yet (refusals by status before the first)
            served.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return served
