"""Settings: the TOML config (docs/configuration.md), validated once, completely, into frozen values.

`load_settings` is the one way in for the commands; `settings_from_mapping`
validates an already parsed mapping (tests, rule files). A config that loads
is one every command can use: check ids, custom checks, windows, cron lines,
quiet hours, `${ENV}` references and the store URL are all checked here.
"""

from __future__ import annotations

from watchdog.core.settings.alerts import (
    PAGERDUTY_EVENTS_URL,
    RECEIVER_TABLES,
    RECEIVERS,
    TELEGRAM_API_URL,
    AlertmanagerSettings,
    AlertSettings,
    PagerDutySettings,
    ReceiverSettings,
    RouteSettings,
    SlackSettings,
    StdoutSettings,
    TelegramSettings,
    WebhookSettings,
)
from watchdog.core.settings.custom import CustomCheck
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
    BUILTIN_CHECK_IDS,
    BUILTIN_CHECK_UNITS,
    NORMALIZED_COLUMNS,
    PSEUDO_CHECK_IDS,
    RUN_CHECK_ID,
    STORE_CHECK_ID,
    CheckOverride,
    DeviationSettings,
    EventSettings,
    ReportSettings,
    Settings,
    SourceSettings,
    StoreSettings,
)
from watchdog.core.settings.timing import ScheduleSettings, WindowSettings

__all__ = [
    "BUILTIN_CHECK_IDS",
    "BUILTIN_CHECK_UNITS",
    "DEMO_POINTER",
    "DEMO_STORE_DIR",
    "NORMALIZED_COLUMNS",
    "PAGERDUTY_EVENTS_URL",
    "PSEUDO_CHECK_IDS",
    "RECEIVERS",
    "RECEIVER_TABLES",
    "RUN_CHECK_ID",
    "STORE_CHECK_ID",
    "STORE_DIR",
    "TELEGRAM_API_URL",
    "AlertSettings",
    "AlertmanagerSettings",
    "CheckOverride",
    "CustomCheck",
    "DeviationSettings",
    "EventSettings",
    "PagerDutySettings",
    "ReceiverSettings",
    "ReportSettings",
    "RouteSettings",
    "ScheduleSettings",
    "Settings",
    "SlackSettings",
    "SourceSettings",
    "StdoutSettings",
    "StoreSettings",
    "TelegramSettings",
    "WebhookSettings",
    "WindowSettings",
    "command_flags",
    "data_dir_from",
    "load_settings",
    "settings_from_mapping",
]
