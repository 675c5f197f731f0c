"""Properties of the windows: consecutive windows judge every obligation exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.base import Report
from checks.builtin import BUILTINS
from tests.builder import T0, H, M, S, Scenario, evaluate_table, unique_table
from watchdog.core.store import Store

session_plan = st.fixed_dictionaries(
    {
        "start_min": st.integers(0, 9 * 60),
        "recall_after_s": st.one_of(st.none(), st.integers(0, 10 * 60)),
        "recall_outcome": st.sampled_from(["completed", "failed", "lost"]),
        "length_min": st.integers(1, 120),
        "ends": st.booleans(),
        "observe_offset_s": st.one_of(st.none(), st.integers(-10 * 60, 20 * 60)),
        "observe_outcome": st.sampled_from(["completed", "failed", "lost"]),
    }
)
session_plans = st.lists(session_plan, min_size=1, max_size=25)
# An example costs its six evaluations (their queries), not its rows: each period here holds
# at least 10 sessions, so one example tries what several small ones would (sessions
# straddling each window boundary among them).
busy_periods = st.lists(session_plan, min_size=10, max_size=25)


def _scenario(plans: list[dict[str, Any]]) -> Scenario:
    sc = Scenario()
    for i, plan in enumerate(plans):
        start = T0 + plan["start_min"] * M
        end = start + plan["length_min"] * M
        b = sc.session(f"s{i:02d}").starts(start)
        if plan["recall_after_s"] is not None:
            at = start + plan["recall_after_s"] * S
            b.emits("memory.recall.started", at)
            if plan["recall_outcome"] != "lost":
                b.emits(f"memory.recall.{plan['recall_outcome']}", at + 2 * S)
        b.emits("tool.call.completed", end)
        if plan["ends"]:
            b.ends(end)
        if plan["observe_offset_s"] is not None:
            at = end + plan["observe_offset_s"] * S
            b.emits("memory.observe.requested", at)
            outcome = {"completed": "observe.store.completed", "failed": "observe.store.failed"}
            if plan["observe_outcome"] in outcome:
                b.emits(outcome[plan["observe_outcome"]], at + 3 * S)
    return sc


COVERAGE = ("recall_coverage", "observe_coverage")
FAILURE_RATES = ("recall_failure_rate", "observe_failure_rate")
# Only the checks tallied run: the others' queries would cost time and prove nothing here.
CONFIG = {
    "window": {"lookback": "30h"},
    "checks": {
        c: {"enabled": False} for c in (b.id for b in BUILTINS) if c not in COVERAGE + FAILURE_RATES
    },
}


def _tally(reports: list[Report]) -> dict[str, int]:
    total: dict[str, int] = {}
    for report in reports:
        for check_id in COVERAGE:
            result = report.checks[check_id]
            total[f"{check_id}.value"] = total.get(f"{check_id}.value", 0) + int(result.value or 0)
            total[f"{check_id}.due"] = total.get(f"{check_id}.due", 0) + result.sample_size
        for check_id in FAILURE_RATES:
            evidence = report.checks[check_id].evidence
            for part in ("completed", "failed", "lost"):
                key = f"{check_id}.{part}"
                total[key] = total.get(key, 0) + int(evidence.to_json().get(part, 0))
    return total


@pytest.mark.slow
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans=busy_periods)
def test_consecutive_windows_judge_each_obligation_once(
    store: Store, plans: list[dict[str, Any]]
) -> None:
    """The sum of unmet (and due) obligations over consecutive 4h windows equals the whole period's."""
    table = unique_table()
    _scenario(plans).write(store, table)
    period_end = T0 + 20 * H
    windows = [
        evaluate_table(store, table, T0 + k * 4 * H, CONFIG, length=timedelta(hours=4))
        for k in range(1, 6)
    ]
    whole = evaluate_table(store, table, period_end, CONFIG, length=timedelta(hours=20))
    assert _tally([whole])["recall_coverage.due"] == len(plans)
    assert _tally(windows) == _tally([whole])
