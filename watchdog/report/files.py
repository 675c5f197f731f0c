"""The page files: `report.html` (the latest) and `reports/<window-end>.html`, pruned.

`write_reports` is what the daemon calls after each run; `stamp` (from
watchdog.core.pages, with `report_url`) and `parse_stamp` name a window's
page in file names and URLs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from datetime import datetime
from pathlib import Path

from checks.base import Report
from watchdog.core.pages import ARCHIVE, STAMP, STAMP_FORMAT, report_url, stamp
from watchdog.core.settings import Settings
from watchdog.report.history import History
from watchdog.report.page import render_page

__all__ = [
    "ARCHIVE",
    "LATEST",
    "STAMP",
    "STAMP_FORMAT",
    "parse_stamp",
    "prune",
    "report_dir",
    "report_url",
    "stamp",
    "write_reports",
]

LATEST = "report.html"


def report_dir(settings: Settings) -> Path:
    """Where pages are written: `report.dir`, else the data directory."""
    return Path(settings.report.dir) if settings.report.dir else settings.data_dir


def parse_stamp(text: str) -> str | None:
    """A window end from a URL (20261128T040000Z or RFC 3339) as its stamp; None if neither."""
    text = text.removesuffix(".html")
    if STAMP.match(text):
        return text
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return stamp(moment)


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".html")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def prune(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` archived pages; returns what was deleted."""
    pages = sorted(p for p in directory.glob("*.html") if STAMP.match(p.stem))
    doomed = pages[: max(0, len(pages) - keep)]
    for page in doomed:
        with contextlib.suppress(FileNotFoundError):
            page.unlink()
    return doomed


def write_reports(report: Report, history: History, settings: Settings, now: datetime) -> Path:
    """Write the page as the latest and as `reports/<window-end>.html`; returns the latter.

    Keeps the newest `report.keep` archived pages under `report.dir`.
    """
    directory = report_dir(settings)
    page = render_page(report, history, settings=settings, generated_at=now)
    archived = directory / ARCHIVE / f"{stamp(report.window.end)}.html"
    _write_atomic(archived, page)
    _write_atomic(directory / LATEST, page)
    prune(directory / ARCHIVE, settings.report.keep)
    return archived
