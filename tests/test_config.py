"""Config loading: defaults, the shipped example, env expansion, validation."""

from __future__ import annotations

import typing
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

import checks.base
from checks.base import NoDataPolicy
from checks.builtin import BUILTINS, configured_checks
from checks.kinds.outcome_rate import OutcomeRateConfig
from watchdog.core import vocabulary
from watchdog.core.durations import parse_duration
from watchdog.core.errors import ConfigError
from watchdog.core.quiet import QuietHours
from watchdog.core.schedule import Schedule
from watchdog.core.settings import (
    load_settings,
    settings_from_mapping,
)
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.model import CheckOverride
from watchdog.core.settings.values import WrittenSecret
from watchdog.runner.once import window_at
from watchdog.runner.plugins import PLUGINS, default_settings

EXAMPLE = Path(__file__).parents[1] / "config" / "watchdog.toml"
_CUSTOM = {"id": "mine", "kind": "coverage", "required": ["x"], "grace": "1h", "target": 0}


def test_example_config_documents_the_defaults() -> None:
    """The shipped config/watchdog.toml loads and equals the built-in defaults."""
    loaded = load_settings(str(EXAMPLE), plugins=PLUGINS, env={})
    defaults = settings_from_mapping({}, plugins=PLUGINS, env={}).read_from(
        str(EXAMPLE)
    )  # the same origin
    assert loaded.model_copy(update={"checks": {}}) == defaults
    assert configured_checks(loaded) == configured_checks(defaults)
    # It writes no live source (nor window length): it judges the default source, as no
    # config does (issue 33, point 12), in windows of the schedule's period (point 6).
    assert not loaded.source_named
    assert loaded.window.length is None


def test_example_config_names_every_check() -> None:
    """Every check id has a documented [checks.<id>] table in the example."""
    text = EXAMPLE.read_text()
    for check_id in PLUGINS.check_ids:
        assert f"[checks.{check_id}]" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("4h", timedelta(hours=4)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    """Durations are written with a unit."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "4", "four hours", "4 hours", "h4", "-5m"])
def test_bad_durations(text: str) -> None:
    """Anything else is refused."""
    with pytest.raises(ValueError):
        parse_duration(text)


def test_env_expansion_with_default() -> None:
    """${NAME} expands from the environment; ${NAME:-x} has a fallback."""
    settings = settings_from_mapping(
        {"source": {"table": "${DB}.events", "name": "${NAME:-prod}"}},
        plugins=PLUGINS,
        env={"DB": "agents"},
    )
    assert (settings.source.table, settings.source.name) == ("agents.events", "prod")


def test_a_secret_records_which_of_its_parts_came_from_the_environment() -> None:
    """A secret key's value is its text and its references' values, each reference as it may be
    shown (a default's text not shown); a value written whole in the file is one literal part."""
    settings = settings_from_mapping(
        {
            "alerts": {
                "webhook": {
                    "env": {"url": "https://${HOST}/hooks/${TOKEN}?v=${V:-dev}"},
                    "file": {"url": "https://alerts.example.com/hooks/team"},
                }
            }
        },
        plugins=PLUGINS,
        env={"HOST": "alerts.example.com", "TOKEN": "t0ken"},
    )
    env, file = settings.alerts.webhook["env"].url, settings.alerts.webhook["file"].url
    assert isinstance(env, WrittenSecret) and isinstance(file, WrittenSecret)
    assert env.get_secret_value() == "https://alerts.example.com/hooks/t0ken?v=dev"
    assert env.parts == (
        ("https://", None),
        ("alerts.example.com", "${HOST}"),
        ("/hooks/", None),
        ("t0ken", "${TOKEN}"),
        ("?v=", None),
        ("dev", "${V:-***}"),
    )
    assert file.parts == (("https://alerts.example.com/hooks/team", None),)
    assert repr(env) == "WrittenSecret('**********')"  # a secret still


def test_store_url_precedence() -> None:
    """WATCHDOG_STORE_URL wins over store.url, which wins over the default."""
    env = {"WATCHDOG_STORE_URL": "chdb:///env", "XDG_DATA_HOME": "/xdg"}
    assert (
        settings_from_mapping(
            {"store": {"url": "chdb:///file"}}, plugins=PLUGINS, env=env
        ).store.url
        == "chdb:///env"
    )
    assert (
        settings_from_mapping({"store": {"url": "chdb:///file"}}, plugins=PLUGINS, env={}).store.url
        == "chdb:///file"
    )


def test_the_environment_is_read_by_the_loader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data directory, and the default store under it, come from the env handed in."""
    monkeypatch.setenv("XDG_DATA_HOME", "/from/the/process")
    monkeypatch.setenv("HOME", "/home/process")
    settings = settings_from_mapping({}, plugins=PLUGINS, env={"XDG_DATA_HOME": "/xdg"})
    assert settings.data_dir == Path("/xdg/memory-watchdog")
    assert settings.store.url == "chdb:///xdg/memory-watchdog/store"
    home_only = settings_from_mapping({}, plugins=PLUGINS, env={"HOME": "/home/ada"})
    assert home_only.data_dir == Path("/home/ada/.local/share/memory-watchdog")


@pytest.mark.parametrize(
    ("config", "key", "problem"),
    [
        ({"checks": {"nope": {"target": 1}}}, "checks.nope", "unknown check id"),
        (
            {"checks": {"custom": [_CUSTOM, _CUSTOM]}},
            "checks.custom[1].id",
            "'mine' is already used above",
        ),
        (
            {"checks": {"custom": [{**_CUSTOM, "id": "recall_coverage"}]}},
            "checks.custom[0].id",
            "is a built-in check id",
        ),
        (
            {"checks": {"custom": [{**_CUSTOM, "window": "23h30m"}]}},
            "checks.custom[0].window",
            "must fit in window.lookback (1d)",
        ),
        ({"schedule": {"cron": "0 */4 * *"}}, "schedule.cron", "is not a crontab line"),
        ({"schedule": {"cron": "0 0 31 2 *"}}, "schedule.cron", "never fires"),
        ({"schedule": {"timezone": "Mars/Olympus"}}, "schedule.timezone", "IANA time zone"),
        (
            {"alerts": {"stdout": {"quiet_hours": "25:00-07:00"}}},
            "alerts.stdout.quiet_hours",
            "is not a daily range",
        ),
        ({"store": {"url": "postgres://x"}}, "store.url", "not a store URL"),
        ({"report": {"base_url": "watchdog.example"}}, "report.base_url", "not an http(s) URL"),
        (
            {"checks": {"recall_coverage": {"no_data": "alert"}}},
            "checks.recall_coverage.no_data",
            "'alert' is not accepted (accepted: 'keep_state' or 'alerting')",
        ),
        (
            {"report": {"base_url": "https://w.example/?a=1&b=<2>"}},
            "report.base_url",
            "no query, fragment, space or any of < > | &",
        ),
        (
            {"store": {"cluster": "prod`; DROP TABLE x"}},
            "store.cluster",
            "is not a cluster name (letters, digits, _)",
        ),
    ],
)
def test_every_config_mistake_fails_at_load(
    config: dict[str, object], key: str, problem: str
) -> None:
    """A config that loads is one every command can use: each mistake is found at load."""
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping(config, plugins=PLUGINS, env={})
    assert raised.value.key == key
    assert problem in raised.value.problem


def test_quiet_hours_and_cron_are_typed_values() -> None:
    """Quiet hours are parsed once into a QuietHours in their time zone."""
    settings = settings_from_mapping(
        {"alerts": {"stdout": {"quiet_hours": "22:00-07:00", "quiet_timezone": "Europe/Berlin"}}},
        plugins=PLUGINS,
        env={},
    )
    quiet = settings.alerts.stdout.quiet_hours if settings.alerts.stdout else None
    assert quiet == QuietHours(time(22), time(7), "Europe/Berlin")


def test_lookback_must_cover_deadlines() -> None:
    """A lookback too short to judge the window's obligations is a config error."""
    with pytest.raises(ConfigError, match="window: lookback 8h is too short"):
        settings_from_mapping({"window": {"lookback": "8h"}}, plugins=PLUGINS, env={})


@pytest.mark.parametrize(
    ("schedule", "window"),
    [
        ({}, {}),
        ({"every": "1m", "delay": "10s"}, {}),
        ({"every": "1d"}, {"length": "1d"}),
        ({"cron": "0 */6 * * *"}, {"length": "6h"}),
    ],
)
def test_the_window_is_one_schedule_period_long(
    schedule: dict[str, str], window: dict[str, str]
) -> None:
    """Every command's window is the schedule's period: derived when window.length is left
    out, accepted when written equal (issue 33, point 6)."""
    settings = settings_from_mapping(
        {"schedule": schedule, "window": window}, plugins=PLUGINS, env={}
    )
    at = datetime(2026, 11, 28, tzinfo=UTC)  # a window end of each of these schedules
    expected = Schedule.from_settings(settings.schedule)
    assert window_at(settings, at).length == at - expected.previous_end(at)
    assert window_at(settings, at).length == settings.schedule.gaps()[1]


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (
            {"schedule": {"every": "1m", "delay": "10s"}, "window": {"length": "4h"}},
            "window.length: 4h is not the schedule's period (schedule.every = '1m')",
        ),
        (
            {"window": {"length": "2h"}},
            "window.length: 2h is not the schedule's period (schedule.every = '4h')",
        ),
        (
            {"schedule": {"cron": "0 9,17 * * *"}, "window": {"length": "8h"}},
            "(schedule.cron = '0 9,17 * * *': windows of 8h to 16h)",
        ),
        (
            {"schedule": {"every": "1d"}, "window": {"lookback": "1d"}},
            "window: lookback 1d is too short to judge the obligations due in a window: it must"
            " be at least the window (the schedule's period, 1d)",
        ),
    ],
)
def test_a_window_length_that_is_not_the_schedule_period_is_refused(
    config: dict[str, dict[str, str]], problem: str
) -> None:
    """A written window.length that disagrees with the schedule is a config error naming both
    (issue 33, point 6), as is a written lookback too short for the schedule's window."""
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(config, plugins=PLUGINS, env={})
    assert problem in str(caught.value)


def test_settings_are_frozen() -> None:
    """Settings cannot be changed after loading."""
    settings = default_settings()
    with pytest.raises(Exception, match="frozen"):
        settings.window.length = timedelta(hours=1)  # type: ignore[misc]


def test_unknown_column_override() -> None:
    """[source.columns] accepts only normalized columns."""
    with pytest.raises(ConfigError, match="unknown normalized column 'sesion_id'"):
        settings_from_mapping({"source": {"columns": {"sesion_id": "x"}}}, plugins=PLUGINS, env={})


def test_builtin_checks_are_the_ids_the_config_knows() -> None:
    """checks.builtin builds exactly the check ids the config accepts, in report order."""
    assert tuple(b.id for b in BUILTINS) == PLUGINS.check_ids


@pytest.mark.parametrize(
    ("config", "key", "problem"),
    [
        ({"window": {"length": "1000000d"}}, "window.length", "is longer than 3650d"),
        ({"schedule": {"every": "1000000d"}}, "schedule.every", "is longer than 3650d"),
        ({"schedule": {"delay": "100000d"}}, "schedule.delay", "is longer than 3650d"),
        ({"schedule": {"delay": "5h"}}, "schedule", "delay 5h must be shorter than 4h"),
        (
            {"checks": {"recall_coverage": {"target": float("nan")}}},
            "checks.recall_coverage.target",
            "not a finite number",
        ),
        (
            {"checks": {"recall_coverage": {"target": float("inf")}}},
            "checks.recall_coverage.target",
            "not a finite number",
        ),
    ],
)
def test_durations_and_numbers_are_bounded_at_load(
    config: dict[str, object], key: str, problem: str
) -> None:
    """A duration beyond 10 years, a delay past the period, a NaN or infinite target: refused."""
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping(config, plugins=PLUGINS, env={})
    assert raised.value.key == key
    assert problem in raised.value.problem


def test_the_no_data_policy_is_per_check_keep_state_by_default() -> None:
    """`no_data` of `[checks.<id>]` and of a custom check reach its spec; unset, keep_state."""
    settings = settings_from_mapping(
        {
            "checks": {
                "recall_coverage": {"no_data": "alerting"},
                "custom": [{**_CUSTOM, "no_data": "alerting"}, {**_CUSTOM, "id": "other"}],
            }
        },
        plugins=PLUGINS,
        env={},
    )
    policies = {spec.id: spec.no_data for spec in configured_checks(settings)}
    assert policies["recall_coverage"] is NoDataPolicy.ALERTING
    assert policies["mine"] is NoDataPolicy.ALERTING
    assert policies["other"] is policies["observe_coverage"] is NoDataPolicy.KEEP_STATE


def test_the_check_vocabulary_is_defined_once_below_the_settings() -> None:
    """Severity, comparison and no-data policy: one enum each (issue 34), which the settings
    validate with and the checks use; no Literal copy of their values in any model."""
    for name in ("Severity", "Comparison", "NoDataPolicy"):
        assert getattr(checks.base, name) is getattr(vocabulary, name)
    fields = {
        "severity": vocabulary.Severity,
        "comparison": vocabulary.Comparison,
        "no_data": vocabulary.NoDataPolicy,
    }
    for model in (CustomCheck, CheckOverride, OutcomeRateConfig):
        for key, enum in fields.items():
            field = model.model_fields.get(key)
            if field is not None:
                assert enum in (field.annotation, *typing.get_args(field.annotation)), (model, key)
