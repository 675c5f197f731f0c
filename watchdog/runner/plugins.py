"""`PLUGINS`: the registry every command validates its settings against, assembled from what
each feature declares once: the check kinds (`checks.kinds`), the built-in checks
(`checks.builtin`), the presets (`checks.layouts`) and the receiver kinds (`alerts.notifiers`).
A source that names no preset reads the joelclaw one. A test that adds a plugin builds its
own registry from this one (`PLUGINS.with_`) instead of registering into a global
(docs/development.md#plugins-one-registration-each).
"""

from __future__ import annotations

from alerts.notifiers import RECEIVERS
from checks.builtin import BUILTINS
from checks.kinds import KINDS
from checks.layouts import PRESETS
from watchdog.core.settings import Plugins, Settings, settings_model

PLUGINS = Plugins(
    kinds=KINDS,
    checks=BUILTINS,
    presets=PRESETS,
    receivers=RECEIVERS,
    default_preset="joelclaw",
    origin=f"{__name__}:PLUGINS",
)


def default_settings(plugins: Plugins = PLUGINS) -> Settings:
    """The built-in defaults of `plugins` (no config file, no environment read)."""
    return settings_model(plugins)()
