"""Settings: the TOML config (docs/configuration.md), validated once, completely, into frozen values.

`load_settings` is the one way in for the commands; `settings_from_mapping`
validates an already parsed mapping (tests, rule files). A config that loads
is one every command can use: check ids, custom checks, windows, cron lines,
quiet hours, `${ENV}` references and the store URL are all checked here.
"""

from __future__ import annotations

from watchdog.core.settings.alerts import AlertSettings, RouteSettings
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.inhibit import InhibitRule
from watchdog.core.settings.load import (
    DEMO_POINTER,
    DEMO_STORE_DIR,
    STORE_DIR,
    command_flags,
    data_dir_from,
    load_settings,
    settings_from_mapping,
)
from watchdog.core.settings.model import (
    NORMALIZED_COLUMNS,
    PSEUDO_CHECK_IDS,
    RUN_CHECK_ID,
    SLO_ALERTS,
    STORE_CHECK_ID,
    CheckOverride,
    DeviationSettings,
    EventSettings,
    ReportSettings,
    Settings,
    SourceSettings,
    StoreSettings,
    settings_model,
    slo_alert_id,
)
from watchdog.core.settings.plugins import Plugins
from watchdog.core.settings.receivers import ReceiverModel
from watchdog.core.settings.timing import ScheduleSettings, WindowSettings

__all__ = [
    "DEMO_POINTER",
    "DEMO_STORE_DIR",
    "NORMALIZED_COLUMNS",
    "PSEUDO_CHECK_IDS",
    "RUN_CHECK_ID",
    "SLO_ALERTS",
    "STORE_CHECK_ID",
    "STORE_DIR",
    "AlertSettings",
    "CheckOverride",
    "CustomCheck",
    "DeviationSettings",
    "EventSettings",
    "InhibitRule",
    "Plugins",
    "ReceiverModel",
    "ReportSettings",
    "RouteSettings",
    "ScheduleSettings",
    "Settings",
    "SourceSettings",
    "StoreSettings",
    "WindowSettings",
    "command_flags",
    "data_dir_from",
    "load_settings",
    "settings_from_mapping",
    "settings_model",
    "slo_alert_id",
]
