"""`check --notify` advances the SLO alerts after the report's own, from outside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.alerts.slack_standin import SlackStandIn
from tests.alerts.test_cli import ROOT, T, cli, write_config

# A burst of failed observes in the last bucket before T (03:55 - 04:00), ten of twenty.
SETUP = """
import sys
from tests.builder import M, S, T0, H, Scenario
from watchdog.core.store import open_store
sc = Scenario()
burst = T0 + 4 * H - 4 * M
for i in range(20):
    sc.session(f"s{i}").starts(burst).observes(burst + i * S, fails=i % 2 == 0)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""

pytestmark = pytest.mark.slow


def test_check_notify_pages_on_a_burst_once(tmp_path: Path, slack: SlackStandIn) -> None:
    """A burst in the last bucket fires `<slo>:page` with the check's run; again: nothing."""
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT)
    common = ["--store", url, "--config", write_config(tmp_path, slack), "--at", T, "--notify"]
    fired = cli("check", *common)
    assert "SLO alerts: fired observe_success:page" in fired.stderr, fired.stderr
    assert any("observe_success:page" in r.raw for r in slack.delivered())
    sent = len(slack.requests)
    again = cli("check", *common)
    assert "SLO alerts" not in again.stderr and len(slack.requests) == sent
