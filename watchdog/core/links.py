"""Where a window's page lives: its name (the window end as `20261128T040000Z`) and its URL.

The report layer writes the pages (watchdog.report.files), the daemon serves them under
`/reports/` (watchdog.daemon.web), and alert messages link to them under `report.base_url`
(alerts.render, and any receiver that carries a link); the naming lives down here so that
every layer reads the same one (docs/alerts.md#a-link-to-the-windows-page).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

ARCHIVE = "reports"  # the archived pages' directory, and their URL path
# reports/<window-end>.html, e.g. reports/20261128T040000Z.html
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMP = re.compile(r"^\d{8}T\d{6}Z$")


def stamp(window_end: datetime) -> str:
    """The file and URL name of a window: its end as 20261128T040000Z."""
    return window_end.astimezone(UTC).strftime(STAMP_FORMAT)


def parse_stamp(text: str) -> str | None:
    """A window end from a URL (20261128T040000Z or RFC 3339) as its stamp; None if neither."""
    text = text.removesuffix(".html")
    if STAMP.match(text):
        return text
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return None
        return stamp(moment)
    except (ValueError, OverflowError):  # not a time, or one UTC cannot hold (year 1 at +14:00)
        return None


def report_url(base_url: str, window_end: datetime) -> str:
    """The link to one window's page on the daemon's server (for alert messages)."""
    return f"{base_url.rstrip('/')}/{ARCHIVE}/{stamp(window_end)}"


def page_link(base_url: str | None, window_end: datetime) -> str:
    """The window's page link when `report.base_url` is set, else ''."""
    return report_url(base_url, window_end) if base_url else ""
