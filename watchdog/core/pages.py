"""Where a window's page lives: its name (the window end as `20261128T040000Z`) and its URL.

The report writes the pages (watchdog.report.files) and the daemon serves
them under `/reports/`; alert messages link to them under `report.base_url`
(the generator URL of a webhook alert, the link of a PagerDuty event), so
the naming lives down here, where every layer can read it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

ARCHIVE = "reports"
# reports/<window-end>.html, e.g. reports/20261128T040000Z.html
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMP = re.compile(r"^\d{8}T\d{6}Z$")


def stamp(window_end: datetime) -> str:
    """The file and URL name of a window: its end as 20261128T040000Z."""
    return window_end.astimezone(UTC).strftime(STAMP_FORMAT)


def report_url(base_url: str, window_end: datetime) -> str:
    """The link to one window's page on the daemon's server (for alert messages)."""
    return f"{base_url.rstrip('/')}/{ARCHIVE}/{stamp(window_end)}"


def page_link(base_url: str | None, window_end: datetime) -> str:
    """The window's page link when `report.base_url` is set, else ''."""
    return report_url(base_url, window_end) if base_url else ""
