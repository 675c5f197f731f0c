"""The plugin registry the settings are validated against (docs/development.md#plugins-one-registration-each):
passed, never global; its settings cross to the daemon's child process by its name."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pytest

from checks.layouts import PRESETS
from checks.presets import NORMALIZED, PresetPlugin
from watchdog.core.errors import ConfigError, RegistryError
from watchdog.core.settings import settings_from_mapping
from watchdog.runner.plugins import PLUGINS

WEBHOOK = {"alerts": {"slack": {"webhook_url": "https://hooks.slack.com/services/T/B/s3cr3t"}}}


def test_settings_cross_a_pickle_as_the_same_settings_of_the_same_registry() -> None:
    """What the daemon hands its child: equal settings, of the very models of PLUGINS."""
    settings = settings_from_mapping(WEBHOOK, plugins=PLUGINS, env={}).read_from("/x/w.toml")
    again = pickle.loads(pickle.dumps(settings))
    assert again == settings
    assert type(again) is type(settings) and type(again.source) is type(settings.source)
    assert type(again.alerts) is type(settings.alerts)
    assert again.config_file == "/x/w.toml" and list(again.alerts.receivers()) == ["slack"]
    assert again.plugins is PLUGINS


def test_a_registry_a_test_builds_is_its_own_and_leaves_the_processs_alone() -> None:
    """A preset added with `with_` is accepted by that registry's settings only."""
    extra = PresetPlugin("extra", "x.extra", lambda types, keys: NORMALIZED, written=False)
    mine = PLUGINS.with_(presets=[extra])
    settings = settings_from_mapping({"source": {"preset": "extra"}}, plugins=mine, env={})
    assert settings.source.table_name == "x.extra"
    assert PLUGINS.presets == PRESETS
    with pytest.raises(ConfigError, match=r"source\.preset: 'extra' is not accepted"):
        settings_from_mapping({"source": {"preset": "extra"}}, plugins=PLUGINS, env={})
    with pytest.raises(RegistryError, match="no origin cannot cross processes"):
        pickle.dumps(settings)


def test_the_accepted_presets_are_the_registrys() -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping({"source": {"preset": "nope"}}, plugins=PLUGINS, env={})
    accepted = " or ".join(
        [", ".join(f"'{p.name}'" for p in PRESETS[:-1]), f"'{PRESETS[-1].name}'"]
    )
    assert raised.value.problem == f"'nope' is not accepted (accepted: {accepted})"


def test_a_receiver_kind_named_like_a_key_of_alerts_is_refused() -> None:
    """A kind `routes` would shadow `[[alerts.routes]]`: the registry's settings refuse it."""
    (webhook,) = [r for r in PLUGINS.receivers if r.model.kind == "webhook"]

    class Routes(webhook.model):  # type: ignore[misc,name-defined]
        kind = "routes"

    @dataclass(frozen=True)
    class Entry:
        model: type = Routes

    with pytest.raises(RegistryError, match="receiver kind 'routes' is a key of \\[alerts\\]"):
        settings_from_mapping({}, plugins=PLUGINS.with_(receivers=[Entry()]), env={})
