"""Every file the watchdog rewrites goes through one durable write, and a cron line through
one parser (watchdog/core/files.py, watchdog/core/cron.py).

A durable write fsyncs the new file before renaming it over the old one, then fsyncs the
directory: after a power loss the file is its old content or its new one, never empty. The
fsyncs are observed by a spy that records which file each one flushed and then does it. That no
other module writes through a temporary of its own or parses a cron line is a lint of
`make lint` (tests/lints/source.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.pages import known_report
from watchdog.core.cron import CronLine
from watchdog.core.files import write_atomic
from watchdog.core.schedule import Schedule
from watchdog.core.settings import ScheduleSettings, settings_from_mapping
from watchdog.daemon.spool import Spool, SpooledRun
from watchdog.report.files import write_reports
from watchdog.report.history import History
from watchdog.runner.plugins import PLUGINS

AT = datetime(2026, 11, 28, 4, tzinfo=UTC)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The paths fsynced while the test runs (each fsync still happens)."""
    real, seen = os.fsync, []

    def spy(fd: int) -> None:
        seen.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield seen


def test_write_atomic_replaces_the_content_whole(tmp_path: Path) -> None:
    """The target holds the new content, and no temporary file is left beside it."""
    target = tmp_path / "a" / "state.json"
    write_atomic(target, "old")
    write_atomic(target, b"new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path) -> None:
    """A write that cannot finish (here: its temporary's directory is gone) changes nothing."""
    target = tmp_path / "state.json"
    write_atomic(target, "old")
    with pytest.raises(FileNotFoundError):
        write_atomic(target, "new", tmp_dir=tmp_path / "missing")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_write_atomic_fsyncs_the_file_then_its_directory(
    tmp_path: Path, fsynced: list[Path]
) -> None:
    """The new file is flushed before the rename and the directory after it."""
    target = tmp_path / "state.json"
    write_atomic(target, "new")
    assert len(fsynced) == 2
    assert fsynced[0].parent == tmp_path and fsynced[0].name.startswith(".tmp-")
    assert fsynced[1] == tmp_path


def test_the_daemon_spool_is_written_durably(tmp_path: Path, fsynced: list[Path]) -> None:
    """A failed run kept in the spool survives a power loss: its file and directory are fsynced."""
    spool = Spool(tmp_path / "spool.json")
    spool.add(
        SpooledRun(at=AT, window_start=AT - timedelta(hours=4), problem="down", recorded_at=AT)
    )
    assert tmp_path in fsynced
    assert any(p.name.startswith(".tmp-") for p in fsynced)
    assert Spool(tmp_path / "spool.json").runs == spool.runs


def test_the_report_pages_are_written_durably(tmp_path: Path, fsynced: list[Path]) -> None:
    """Both pages (the latest and the archived one) are fsynced, and so are their directories."""
    settings = settings_from_mapping({"report": {"dir": str(tmp_path)}}, plugins=PLUGINS, env={})
    write_reports(known_report(), History(), settings, now=AT)
    assert fsynced.count(tmp_path) == 1 and fsynced.count(tmp_path / "reports") == 1
    assert len([p for p in fsynced if p.name.startswith(".tmp-")]) == 2


def test_a_cron_line_that_never_fires_is_refused() -> None:
    """`0 0 31 2 *` parses but has no date: the parser says so."""
    with pytest.raises(ValueError, match="never fires"):
        CronLine.parse("0 0 31 2 *")
    with pytest.raises(ValueError, match="is not a crontab line"):
        CronLine.parse("every four hours")


def test_the_schedule_and_the_longest_gap_read_the_same_fire_times() -> None:
    """The daemon's windows of a cron line are the fire times the parser gives, in its zone."""
    settings = ScheduleSettings(cron="0 9,17 * * mon-fri", timezone="Europe/Berlin")
    schedule = Schedule.from_settings(settings)
    line = CronLine.parse("0 9,17 * * mon-fri", "Europe/Berlin")
    start = datetime(2026, 3, 27, 12, tzinfo=UTC)  # a Friday, before the spring change
    ends, moment = [], start
    for _ in range(4):
        moment = schedule.next_end(moment)
        ends.append(moment)
    assert ends == [
        datetime(2026, 3, 27, 16, tzinfo=UTC),
        datetime(2026, 3, 30, 7, tzinfo=UTC),  # summer time: 9:00 is 07:00Z
        datetime(2026, 3, 30, 15, tzinfo=UTC),
        datetime(2026, 3, 31, 7, tzinfo=UTC),
    ]
    assert line.at_or_after(start) == ends[0]
    # Friday 17:00 to Monday 9:00, the weekend of autumn's change having an hour more.
    assert line.gaps(timedelta(hours=4))[1] == timedelta(hours=65)
