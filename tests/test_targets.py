"""Targets with their units: `5%` for rates and shares, durations for latencies and freshness.

A bare number keeps its old meaning (a rate's fraction, milliseconds, seconds, a count); a rate
above 1 without `%` is refused at load, naming the key and what was probably meant.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks.base import Status
from checks.builtin import configured_checks
from tests.builder import T0, H, M, S, Scenario, evaluate
from watchdog.core.errors import ConfigError
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.plugins import PLUGINS

BIN = Path(sys.executable).parent / "memory-watchdog"


def targets(config: dict[str, Any]) -> dict[str, float]:
    """Every check's target, as the loaded config gives it."""
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    return {spec.id: spec.target for spec in configured_checks(settings)}


@pytest.mark.parametrize(
    ("check_id", "written", "value"),
    [
        ("observe_failure_rate", "5%", 0.05),
        ("recall_failure_rate", "12.5%", 0.125),
        ("write_gate_drift", "70%", 0.7),
        ("observe_failure_rate", 0.05, 0.05),  # a bare fraction, as before
        ("observe_failure_rate", 1, 1.0),  # 100%: the edge of a rate
        ("recall_latency_p95", "3s", 3000),
        ("recall_latency_p95", "1500ms", 1500),
        ("recall_latency_p95", 3000, 3000),  # bare: milliseconds, as before
        ("telemetry_freshness", "4h", 14400),
        ("telemetry_freshness", "1h30m", 5400),
        ("telemetry_freshness", 600, 600),  # bare: seconds, as before
        ("circuit_breaker", 5, 5),
    ],
)
def test_a_target_is_read_in_its_checks_unit(check_id: str, written: Any, value: float) -> None:
    """`5%` of a rate is 0.05, `3s` of a latency 3000 ms, `4h` of freshness 14400 s."""
    assert targets({"checks": {check_id: {"target": written}}})[check_id] == value


@pytest.mark.parametrize(
    ("check_id", "written", "problem"),
    [
        (
            "observe_failure_rate",
            5,
            '5 is 500%: a rate is 0..1; did you mean "5%" (0.05)?',
        ),
        ("write_gate_drift", 70, 'did you mean "70%" (0.7)?'),
        ("observe_failure_rate", "150%", "a rate is 0% to 100%"),
        ("observe_failure_rate", "3s", 'a percentage ("5%"), not a duration'),
        ("recall_latency_p95", "5%", "a percentage is for rates"),
        ("telemetry_freshness", "5%", "or a number of seconds"),
        ("circuit_breaker", "3s", "this check counts; its target is a number"),
        ("recall_latency_p95", "three seconds", "is not a target (a number, a percentage"),
    ],
)
def test_a_target_that_does_not_fit_its_unit_is_refused_naming_the_key(
    check_id: str, written: Any, problem: str
) -> None:
    """A rate above 1 without `%`, a percentage for a latency, a duration for a count: exit 2."""
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping({"checks": {check_id: {"target": written}}}, plugins=PLUGINS, env={})
    assert raised.value.key == f"checks.{check_id}.target"
    assert problem in raised.value.problem


def _custom(**fields: Any) -> dict[str, Any]:
    return {"checks": {"custom": [{"id": "mine", **fields}]}}


SHARE = {"kind": "share", "events": ["gate"], "field": "verdict", "value": "discard"}
RATE = {"kind": "outcome_rate", "started": ["a"], "completed": ["b"], "failed": ["c"]}
QUANTILE = {"kind": "quantile", "events": ["memory.recall.completed"], "q": 0.5}


@pytest.mark.parametrize(
    ("fields", "value"),
    [
        ({**SHARE, "target": "40%"}, 0.4),
        ({**RATE, "grace": "1m", "target": "2%"}, 0.02),
        ({**QUANTILE, "target": "2s"}, 2000),
        ({**QUANTILE, "field": "result_count", "target": 7}, 7),
        ({"kind": "freshness", "target": "15m"}, 900),
        ({"kind": "streak", "bad": ["x"], "good": ["y"], "target": 2}, 2),
    ],
)
def test_a_custom_checks_target_is_read_in_its_kinds_unit(
    fields: dict[str, Any], value: float
) -> None:
    """A custom share takes `40%`, a latency quantile `2s`, a freshness `15m`."""
    assert targets(_custom(**fields))["mine"] == value


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({**SHARE, "target": 40}, 'did you mean "40%" (0.4)?'),
        ({**RATE, "grace": "1m", "target": 5}, 'did you mean "5%" (0.05)?'),
        ({**QUANTILE, "field": "result_count", "target": "2s"}, "this check counts"),
        ({"kind": "freshness", "target": "5%"}, "a percentage is for rates"),
    ],
)
def test_a_custom_checks_target_that_does_not_fit_is_refused(
    fields: dict[str, Any], problem: str
) -> None:
    """The same rules for `[[checks.custom]]`, named by its index."""
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping(_custom(**fields), plugins=PLUGINS, env={})
    assert raised.value.key == "checks.custom[0].target"
    assert problem in raised.value.problem


def test_an_override_of_a_custom_check_is_read_in_its_unit() -> None:
    """`[checks.<custom id>] target = "30%"` overrides a custom share in its unit; `30` is refused."""
    config = _custom(**SHARE, target=0.5)
    config["checks"]["mine"] = {"target": "30%"}
    assert targets(config)["mine"] == 0.3
    config["checks"]["mine"] = {"target": 30}
    with pytest.raises(ConfigError, match=r"checks\.mine\.target: 30 is 3000%"):
        settings_from_mapping(config, plugins=PLUGINS, env={})


def test_a_percentage_target_breaches_as_its_fraction(store: Store) -> None:
    """`target = "5%"` judges observes as 0.05 does: 1 failed of 10 (10%) breaches."""
    sc = Scenario()
    for i in range(10):
        sc.session(f"s{i}").starts(T0 + H).recalls(T0 + H + S).observes(
            T0 + H + 10 * M, fails=i == 0
        )
    config = {"checks": {"observe_failure_rate": {"target": "5%", "min_samples": 0}}}
    result = evaluate(store, sc, T0 + 4 * H, config).checks["observe_failure_rate"]
    assert (result.status, result.value, result.target) == (Status.BREACHED, 0.1, 0.05)


@pytest.mark.slow
def test_config_check_refuses_a_rate_above_1_naming_key_and_meaning(tmp_path: Path) -> None:
    """The issue's config: `target = 5` for observe_failure_rate is exit 2, not `breach >= 500%`."""
    path = tmp_path / "watchdog.toml"
    path.write_text("[checks.observe_failure_rate]\ntarget = 5\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    result = subprocess.run(
        [str(BIN), "config", "check", "--no-store", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        check=False,
    )
    assert result.returncode == 2
    assert (
        f"{path}: checks.observe_failure_rate.target: 5 is 500%: a rate is 0..1;"
        ' did you mean "5%" (0.05)?'
    ) in result.stderr
