"""Config loading: defaults, the shipped example, env expansion, validation."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from checks.builtin import BUILTIN, configured_checks
from watchdog.core.errors import ConfigError
from watchdog.core.settings import Settings, load_settings, parse_duration, settings_from_mapping

EXAMPLE = Path(__file__).parents[1] / "config" / "watchdog.toml"


def test_example_config_documents_the_defaults() -> None:
    """The shipped config/watchdog.toml loads and equals the built-in defaults."""
    loaded = load_settings(str(EXAMPLE), env={})
    defaults = settings_from_mapping({}, env={})
    assert loaded.model_copy(update={"checks": {}}) == defaults
    assert configured_checks(loaded) == configured_checks(defaults)


def test_example_config_names_every_check() -> None:
    """Every check id has a documented [checks.<id>] table in the example."""
    text = EXAMPLE.read_text()
    for check_id in BUILTIN:
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
        {"source": {"table": "${DB}.events", "name": "${NAME:-prod}"}}, env={"DB": "agents"}
    )
    assert (settings.source.table, settings.source.name) == ("agents.events", "prod")


def test_store_url_precedence() -> None:
    """WATCHDOG_STORE_URL wins over store.url; the default lives under XDG_DATA_HOME."""
    env = {"WATCHDOG_STORE_URL": "chdb:///env", "XDG_DATA_HOME": "/xdg"}
    assert (
        settings_from_mapping({"store": {"url": "chdb:///file"}}, env=env).store.url
        == "chdb:///env"
    )
    assert settings_from_mapping({}, env={"XDG_DATA_HOME": "/xdg"}).store.url.startswith("chdb://")


def test_lookback_must_cover_deadlines() -> None:
    """A lookback too short to judge the window's obligations is a config error."""
    with pytest.raises(ConfigError, match="window: lookback 8h is too short"):
        settings_from_mapping({"window": {"lookback": "8h"}}, env={})


def test_settings_are_frozen() -> None:
    """Settings cannot be changed after loading."""
    settings = Settings()
    with pytest.raises(Exception, match="frozen"):
        settings.window.length = timedelta(hours=1)  # type: ignore[misc]


def test_unknown_column_override() -> None:
    """[source.columns] accepts only normalized columns."""
    with pytest.raises(ConfigError, match="unknown normalized column 'sesion_id'"):
        settings_from_mapping({"source": {"columns": {"sesion_id": "x"}}}, env={})
