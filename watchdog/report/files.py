"""The page files: `report.html` (the latest) and `reports/<window-end>.html`, pruned.

`write_reports` is what the daemon calls after each run, keeping the newest `report.keep`; a
window's page is named by `watchdog.core.links` (`stamp`), as its URL is
(docs/operations.md#the-daemons-pages-and-healthz).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from checks.base import Report
from watchdog.core.files import write_atomic
from watchdog.core.links import ARCHIVE, STAMP, stamp
from watchdog.core.settings import Settings
from watchdog.report.history import History
from watchdog.report.page import render_page
from watchdog.report.slo_page import SloView

LATEST = "report.html"


def report_dir(settings: Settings) -> Path:
    """Where pages are written: `report.dir`, else the data directory."""
    return Path(settings.report.dir) if settings.report.dir else settings.data_dir


def prune(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` archived pages; returns what was deleted."""
    pages = sorted(p for p in directory.glob("*.html") if STAMP.match(p.stem))
    doomed = pages[: max(0, len(pages) - keep)]
    for page in doomed:
        with contextlib.suppress(FileNotFoundError):
            page.unlink()
    return doomed


def write_reports(
    report: Report,
    history: History,
    settings: Settings,
    now: datetime,
    slos: Sequence[SloView] | None = None,
) -> Path:
    """Write the page as the latest and as `reports/<window-end>.html`; returns the latter.

    Keeps the newest `report.keep` archived pages under `report.dir`. `slos`: the SLOs with
    their buckets (`slo_views`); None draws the report's own without a burndown.
    """
    directory = report_dir(settings)
    page = render_page(report, history, settings=settings, generated_at=now, slos=slos)
    archived = directory / ARCHIVE / f"{stamp(report.window.end)}.html"
    write_atomic(archived, page)
    write_atomic(directory / LATEST, page)
    prune(directory / ARCHIVE, settings.report.keep)
    return archived
