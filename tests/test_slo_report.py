"""SLOs in the report (docs/slo.md#in-the-report): `"slos"` in the JSON report at the run's time,
one line per SLO in the text report, and `config check` warning of tiers that never fire."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.builder import T0, H, M, Scenario, settings_for, unique_table
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.text import render_text
from watchdog.runner.once import run_once, window_at
from watchdog.runner.slo import catch_up

BIN = Path(sys.executable).parent / "memory-watchdog"
AT = T0 + 8 * H


def world(store: Store) -> Settings:
    sc = Scenario()
    for i in range(20):
        t = T0 + 2 * H + i * 13 * M
        sc.session(f"s{i}").starts(t).recalls(t + M, fails=i % 7 == 0).observes(t + 2 * M)
    table = unique_table()
    sc.write(store, table)
    return settings_for(table, {"store": {"database": f"wd_{uuid.uuid4().hex[:10]}"}})


def test_the_json_report_carries_each_slo_with_the_specs_keys(store: Store) -> None:
    """`slos.<name>` holds check, sli, objective, period, bucket, counts, coverage, budget,
    status, burn per window, the four tiers and exhaustion_s."""
    settings = world(store)
    catch_up(store, settings, AT, now=AT + H)
    document = run_once(store, settings, window_at(settings, AT)).to_json()
    assert list(document["slos"]) == ["observe_success", "recall_success", "recall_latency"]
    slo = document["slos"]["recall_success"]
    assert set(slo) == {
        "check", "sli", "objective", "period", "bucket", "at", "good", "bad", "total",
        "coverage", "budget", "status", "burn", "tiers", "exhaustion_s",
    }  # fmt: skip
    assert (slo["check"], slo["sli"], slo["objective"], slo["period"], slo["bucket"]) == (
        "recall_failure_rate",
        "ratio",
        0.99,
        "30d",
        "5m",
    )
    assert (slo["good"], slo["bad"], slo["total"]) == (17, 3, 20)
    assert slo["at"] == "2026-11-28T08:00:00Z" and slo["coverage"] == 1.0
    assert set(slo["budget"]) == {"allowed", "consumed", "remaining"}
    assert list(slo["burn"]) == ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]
    assert [(t["name"], t["alert"], t["long"], t["short"]) for t in slo["tiers"]] == [
        ("page-fast", "page", "1h", "5m"),
        ("page-slow", "page", "6h", "30m"),
        ("ticket-fast", "ticket", "1d", "2h"),
        ("ticket-slow", "ticket", "3d", "6h"),
    ]


def test_an_slo_with_no_judged_bucket_reads_no_data_not_a_full_budget(store: Store) -> None:
    """Before any bucket is judged: status no_data, coverage 0, budget and burns null."""
    settings = world(store)
    slo = run_once(store, settings, window_at(settings, AT)).to_json()["slos"]["observe_success"]
    assert (slo["status"], slo["coverage"], slo["exhaustion_s"]) == ("no_data", 0.0, None)
    assert slo["budget"] == {"allowed": None, "consumed": None, "remaining": None}
    assert set(slo["burn"].values()) == {None}


def test_the_text_report_has_one_line_per_slo(store: Store) -> None:
    """Each SLO: its status, objective over period, budget left and burns, in one line."""
    settings = world(store)
    catch_up(store, settings, AT, now=AT + H)
    text = render_text(run_once(store, settings, window_at(settings, AT)))
    lines = [line for line in text.splitlines() if "over 30d" in line]
    assert len(lines) == 3
    (recall,) = [line for line in lines if "recall_success" in line]
    assert "exhausted" in recall and "99% over 30d" in recall and "burn 5m " in recall


def config_check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """`config check --no-store` of a config holding `text`."""
    config = tmp_path / "watchdog.toml"
    config.write_text(text)
    return subprocess.run(
        [str(BIN), "config", "check", "--config", str(config), "--no-store"],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow
def test_config_check_warns_of_a_tier_that_can_never_fire(tmp_path: Path) -> None:
    """At 90% the highest burn is 10: page-fast (14.4) never fires; a warning, exit 0."""
    done = config_check(tmp_path, '[slo.observe_success]\nobjective = "90%"\n')
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "memory-watchdog: warning: slo.observe_success.objective: at 90% the highest burn is 10,"
        " so tier page-fast (factor 14.4) can never fire"
    ]


@pytest.mark.slow
def test_config_check_refuses_an_objective_of_100_percent(tmp_path: Path) -> None:
    """`objective = "100%"` fails `config check` with exit 2, naming the key."""
    done = config_check(tmp_path, '[slo.recall_success]\nobjective = "100%"\n')
    assert done.returncode == 2
    assert "slo.recall_success.objective: '100%': an objective is below 100%" in done.stderr
