"""`[slo]` and `[slo.<name>]` (docs/spec.md section 11): the built-in SLOs, custom ones over
outcome-rate and quantile checks, and every bad value refused naming its key."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest

from checks.base import SloSpec
from checks.builtin import configured_checks
from checks.slo.specs import slo_specs
from watchdog.core.errors import ConfigError
from watchdog.core.settings import settings_from_mapping
from watchdog.runner.plugins import PLUGINS

RATE_CHECK = {
    "id": "gate_failure_rate",
    "kind": "outcome_rate",
    "started": ["gate.started"],
    "completed": ["gate.completed"],
    "failed": ["gate.failed"],
    "grace": "5m",
    "target": "5%",
}
QUANTILE_CHECK = {
    "id": "gate_latency_p90",
    "kind": "quantile",
    "events": ["gate.completed"],
    "q": 0.9,
    "target": "2s",
}
STREAK_CHECK = {
    "id": "gate_streak",
    "kind": "streak",
    "bad": ["gate.failed"],
    "good": ["gate.completed"],
    "target": 3,
}


def specs(config: dict[str, Any]) -> dict[str, SloSpec]:
    """The enabled SLOs of a config, by name."""
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    return {spec.name: spec for spec in slo_specs(settings, configured_checks(settings))}


def problems(config: dict[str, Any]) -> list[str]:
    """Every problem loading `config` names, as `key: problem` lines."""
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(config, plugins=PLUGINS, env={})
    return [f"{one.key}: {one.problem}" for one in caught.value.problems]


def test_three_slos_are_built_in_and_enabled() -> None:
    """With no config: observe_success and recall_success at 99%, recall_latency at the p95's 95%."""
    found = specs({})
    assert {name: (s.check.id, s.sli, s.objective) for name, s in found.items()} == {
        "observe_success": ("observe_failure_rate", "ratio", Fraction(99, 100)),
        "recall_success": ("recall_failure_rate", "ratio", Fraction(99, 100)),
        "recall_latency": ("recall_latency_p95", "latency", Fraction(95, 100)),
    }


def test_defaults_are_a_30_day_period_5_minute_buckets_and_10_events() -> None:
    """period 30d, slo.bucket 5m, min_events 10 unless written."""
    params = specs({})["observe_success"].params
    assert (params.period, params.bucket, params.min_events) == (
        timedelta(days=30),
        timedelta(minutes=5),
        10,
    )


def test_a_table_of_a_built_in_name_changes_only_the_keys_it_writes() -> None:
    """`[slo.observe_success] objective = "99.9%"` keeps its check and its period."""
    found = specs({"slo": {"observe_success": {"objective": "99.9%", "period": "7d"}}})
    spec = found["observe_success"]
    assert (spec.check.id, spec.objective, spec.params.period) == (
        "observe_failure_rate",
        Fraction(999, 1000),
        timedelta(days=7),
    )


def test_an_objective_is_read_exactly_as_a_percentage_or_a_fraction() -> None:
    """ "99.9%" and 0.999 are both 999/1000, exactly (no float rounding of 99.9 / 100)."""
    written = {"a": "99.9%", "b": 0.999}
    config = {
        name: {"check": "observe_failure_rate", "objective": v} for name, v in written.items()
    }
    found = specs({"slo": config})
    assert found["a"].objective == found["b"].objective == Fraction(999, 1000)


def test_a_disabled_slo_is_left_out() -> None:
    """`enabled = false` turns a built-in SLO off."""
    assert "recall_latency" not in specs({"slo": {"recall_latency": {"enabled": False}}})


def test_the_bucket_may_be_one_minute() -> None:
    """slo.bucket = "1m" cuts every SLO's time into minutes."""
    assert specs({"slo": {"bucket": "1m"}})["recall_success"].params.bucket == timedelta(minutes=1)


def test_an_slo_follows_a_custom_outcome_rate_check() -> None:
    """A custom outcome_rate check carries a ratio SLO; its objective is required and read."""
    config = {
        "checks": {"custom": [RATE_CHECK]},
        "slo": {"gate": {"check": "gate_failure_rate", "objective": "99.5%"}},
    }
    spec = specs(config)["gate"]
    assert (spec.check.id, spec.sli, spec.objective) == (
        "gate_failure_rate",
        "ratio",
        Fraction(995, 1000),
    )


def test_an_slo_over_a_custom_quantile_check_defaults_to_its_quantile() -> None:
    """A custom quantile check of q = 0.9 carries a latency SLO of objective 90%."""
    config = {
        "checks": {"custom": [QUANTILE_CHECK]},
        "slo": {"gate": {"check": "gate_latency_p90"}},
    }
    spec = specs(config)["gate"]
    assert (spec.sli, spec.objective) == ("latency", Fraction(9, 10))


@pytest.mark.parametrize("written", ["100%", 1, 1.0])
def test_an_objective_of_100_percent_is_refused_naming_the_key(written: Any) -> None:
    """100% allows no bad event at all: refused, naming slo.<name>.objective."""
    (problem,) = problems({"slo": {"observe_success": {"objective": written}}})
    assert problem.startswith("slo.observe_success.objective: ")
    assert "below 100%" in problem


@pytest.mark.parametrize("written", ["0%", 0])
def test_an_objective_of_0_percent_is_refused(written: Any) -> None:
    """An objective is strictly above 0%."""
    (problem,) = problems({"slo": {"observe_success": {"objective": written}}})
    assert problem.startswith("slo.observe_success.objective: ") and "above 0%" in problem


def test_a_bare_objective_above_1_names_the_percentage_meant() -> None:
    """objective = 99 is refused as targets are: did you mean "99%"?"""
    (problem,) = problems({"slo": {"observe_success": {"objective": 99}}})
    assert problem == (
        'slo.observe_success.objective: 99 is 9900%: a rate is 0..1; did you mean "99%" (0.99)?'
    )


def test_a_check_that_is_no_rate_or_quantile_is_refused_listing_the_accepted_ids() -> None:
    """An SLO over a coverage check is refused, naming the key and the checks it may follow."""
    config = {
        "checks": {"custom": [RATE_CHECK, STREAK_CHECK]},
        "slo": {"x": {"check": "gate_streak", "objective": "99%"}},
    }
    assert problems(config) == [
        "slo.x.check: 'gate_streak' is not an outcome-rate or quantile check (accepted:"
        " observe_failure_rate, recall_failure_rate, recall_latency_p95, gate_failure_rate)"
    ]


def test_an_unknown_check_id_is_refused() -> None:
    """An SLO over a check that does not exist names the key and the accepted ids."""
    (problem,) = problems({"slo": {"x": {"check": "nope", "objective": "99%"}}})
    assert problem.startswith("slo.x.check: 'nope' is not a check id (accepted: observe_failure")


def test_a_custom_slo_needs_its_check() -> None:
    """`check` is required in a table that is not a built-in SLO's."""
    assert problems({"slo": {"x": {"objective": "99%"}}}) == ["slo.x.check: is required"]


def test_a_rate_slo_needs_an_objective() -> None:
    """An SLO over an outcome-rate check has no quantile to default to."""
    assert problems({"slo": {"x": {"check": "recall_failure_rate"}}}) == [
        'slo.x.objective: is required for an SLO over an outcome-rate check (e.g. "99.9%")'
    ]


@pytest.mark.parametrize("period", ["12h", "91d"])
def test_a_period_outside_1_to_90_days_is_refused(period: str) -> None:
    """period is 1d to 90d."""
    (problem,) = problems({"slo": {"recall_success": {"period": period}}})
    assert problem == f"slo.recall_success.period: {period} is not a period of 1d to 90d"


def test_a_period_of_no_whole_buckets_is_refused() -> None:
    """A period holds whole buckets (coverage counts them)."""
    (problem,) = problems({"slo": {"recall_success": {"period": "1d2m"}}})
    assert problem.startswith("slo.recall_success.period: 1442m is no whole number of buckets")


def test_a_bucket_other_than_1m_or_5m_is_refused() -> None:
    """slo.bucket is "1m" or "5m"."""
    assert problems({"slo": {"bucket": "2m"}}) == [
        "slo.bucket: '2m' is not accepted (accepted: 1m, 5m)"
    ]


def test_an_unknown_key_of_an_slo_is_refused_listing_the_accepted_ones() -> None:
    """An unknown key in [slo.<name>] is named with the keys accepted, like everywhere."""
    assert problems({"slo": {"observe_success": {"objectve": "99%"}}}) == [
        "slo.observe_success.objectve: unknown key"
        " (accepted: check, objective, period, enabled, min_events)"
    ]


def test_a_plain_value_in_slo_other_than_bucket_is_refused() -> None:
    """[slo] holds `bucket` and tables; `slo.foo = 3` is neither."""
    assert problems({"slo": {"foo": 3}}) == [
        "slo: 'foo' is not a key of [slo] (accepted: bucket, or a table [slo.<name>])"
    ]


def test_an_slo_name_is_lowercase_letters_digits_and_underscores() -> None:
    """An SLO's name becomes its alerts' names: refused when it is not an identifier."""
    assert problems({"slo": {"Bad-Name": {"check": "recall_failure_rate"}}}) == [
        "slo: 'Bad-Name' is not an SLO name (lowercase letters, digits, _)"
    ]


def test_min_events_is_not_negative() -> None:
    """min_events is a count."""
    (problem,) = problems({"slo": {"recall_success": {"min_events": -1}}})
    assert problem.startswith("slo.recall_success.min_events: ")
