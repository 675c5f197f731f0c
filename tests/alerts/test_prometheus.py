"""The shipped Prometheus rules, and the daemon's /metrics as promtool reads them.

`config/prometheus/memory-watchdog.rules.yml` passes `promtool check rules`
and its unit tests (`promtool test rules`: series in, alerts out), and every
metric it names is one the daemon serves; a live `/metrics` scrape (a daemon
in this process, one window judged) passes `promtool check metrics`. Skipped,
saying how to get it, when promtool is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.alerts.prometheus_rig import run_promtool, scrape_after_a_run, served_names
from watchdog.core.store import Store

RULES = Path(__file__).parents[2] / "config" / "prometheus" / "memory-watchdog.rules.yml"
RULE_TESTS = RULES.with_name("memory-watchdog.rules.test.yml")


@pytest.fixture(scope="module")
def scrape(store: Store, tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of a daemon that judged one window (on the wall clock's terms: its own)."""
    return scrape_after_a_run(store, tmp_path_factory)


@pytest.mark.slow
def test_the_shipped_rules_pass_promtool_check_rules() -> None:
    """`promtool check rules` on config/prometheus/memory-watchdog.rules.yml."""
    checked = run_promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {RULES.read_text().count('- alert:')} rules found" in checked.stdout


@pytest.mark.slow
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
    served = served_names(scrape, store, tmp_path)
    named = set(re.findall(r"\bmemory_watchdog_[a-z_]+", RULES.read_text(encoding="utf-8")))
    assert named and named <= served, named - served
