"""The daemon's schedule as pure functions: aligned windows, catch-up, DST days."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.errors import ConfigError
from watchdog.core.schedule import Schedule, catch_up
from watchdog.core.settings import ScheduleSettings, settings_from_mapping
from watchdog.runner.plugins import PLUGINS

H = timedelta(hours=1)
M = timedelta(minutes=1)
S = timedelta(seconds=1)
BERLIN = ZoneInfo("Europe/Berlin")
SPRING = datetime(2026, 3, 29, tzinfo=BERLIN)  # 02:00 -> 03:00 local
AUTUMN = datetime(2026, 10, 25, tzinfo=BERLIN)  # 03:00 -> 02:00 local


def schedule(**values: str) -> Schedule:
    return Schedule.from_settings(ScheduleSettings.model_validate({"delay": "0s", **values}))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def windows(sched: Schedule, after: datetime, n: int) -> list[tuple[datetime, datetime]]:
    """The next `n` windows after `after`, as (start, end) in UTC."""
    out, end = [], sched.next_end(after)
    for _ in range(n):
        out.append(sched.window_bounds(end))
        end = sched.next_end(end)
    return out


def local_hours(sched: Schedule, day: datetime) -> list[tuple[str, float]]:
    """Each window ending on the local `day`: its local end time and its length in hours."""
    tz = ZoneInfo(sched.timezone)
    found = []
    for start, end in windows(sched, day - S, 12):
        if end.astimezone(tz).date() != day.date():
            break
        found.append((end.astimezone(tz).strftime("%H:%M%z"), (end - start) / H))
    return found


def test_run_due_at_four_judges_midnight_to_four_whenever_it_starts() -> None:
    """The run due at 04:00 judges [00:00, 04:00) even when it starts at 04:07."""
    sched = schedule(every="4h", delay="2m")
    started = utc(2026, 11, 28, 4, 7)
    end = sched.due_end(started)
    assert sched.window_bounds(end) == (utc(2026, 11, 28, 0), utc(2026, 11, 28, 4))


def test_delay_holds_the_window_until_late_telemetry_is_in() -> None:
    """Before end + delay the previous window is still the due one; the next run is end + delay."""
    sched = schedule(every="4h", delay="2m")
    assert sched.due_end(utc(2026, 11, 28, 4, 1)) == utc(2026, 11, 28, 0)
    assert sched.due_end(utc(2026, 11, 28, 4, 2)) == utc(2026, 11, 28, 4)
    assert sched.next_run(utc(2026, 11, 28, 4, 1)) == utc(2026, 11, 28, 4, 2)
    assert sched.next_run(utc(2026, 11, 28, 4, 2)) == utc(2026, 11, 28, 8, 2)


def test_every_windows_tile_time_without_gap_or_overlap() -> None:
    """Consecutive windows share their bounds, so every obligation is judged once."""
    sched = schedule(every="2s")
    found = windows(sched, utc(2026, 11, 28, 0, 0, 1), 5)
    assert [end - start for start, end in found] == [2 * S] * 5
    assert all(a[1] == b[0] for a, b in itertools.pairwise(found))
    assert found[0] == (utc(2026, 11, 28, 0, 0, 0), utc(2026, 11, 28, 0, 0, 2))


def test_every_four_hours_follows_local_midnight_in_the_time_zone() -> None:
    """In Europe/Berlin the ends are 00:00, 04:00, ... local time, not UTC."""
    sched = schedule(every="4h", timezone="Europe/Berlin")
    day = datetime(2026, 11, 28, tzinfo=BERLIN)
    assert [end for end, _ in local_hours(sched, day)] == [
        "00:00+0100",
        "04:00+0100",
        "08:00+0100",
        "12:00+0100",
        "16:00+0100",
        "20:00+0100",
    ]


@pytest.mark.parametrize("trigger", [{"every": "4h"}, {"cron": "0 */4 * * *"}])
def test_dst_spring_day_has_a_three_hour_window(trigger: dict[str, str]) -> None:
    """When 02:00 jumps to 03:00, the window ending 04:00 local lasts 3 hours."""
    sched = schedule(timezone="Europe/Berlin", **trigger)
    assert local_hours(sched, SPRING) == [
        ("00:00+0100", 4.0),
        ("04:00+0200", 3.0),
        ("08:00+0200", 4.0),
        ("12:00+0200", 4.0),
        ("16:00+0200", 4.0),
        ("20:00+0200", 4.0),
    ]


@pytest.mark.parametrize("trigger", [{"every": "4h"}, {"cron": "0 */4 * * *"}])
def test_dst_autumn_day_has_a_five_hour_window(trigger: dict[str, str]) -> None:
    """When 03:00 falls back to 02:00, the window ending 04:00 local lasts 5 hours."""
    sched = schedule(timezone="Europe/Berlin", **trigger)
    assert local_hours(sched, AUTUMN)[:3] == [
        ("00:00+0200", 4.0),
        ("04:00+0100", 5.0),
        ("08:00+0100", 4.0),
    ]


def test_hourly_schedule_judges_the_repeated_hour_twice_and_skips_the_missing_one() -> None:
    """Hourly in Berlin: both 02:00s end a window in autumn; no 02:00 exists in spring."""
    sched = schedule(every="1h", timezone="Europe/Berlin")
    autumn = [end for end, _ in local_hours(sched, AUTUMN)][1:6]
    assert autumn == ["01:00+0200", "02:00+0200", "02:00+0100", "03:00+0100", "04:00+0100"]
    spring = local_hours(sched, SPRING)[1:4]
    assert spring == [("01:00+0100", 1.0), ("03:00+0200", 1.0), ("04:00+0200", 1.0)]


def test_cron_in_the_repeated_hour_moves_forward() -> None:
    """`30 * * * *` through the autumn change yields both 02:30s, then 03:30, never stalling."""
    sched = schedule(cron="30 * * * *", timezone="Europe/Berlin")
    ends = [end for _, end in windows(sched, utc(2026, 10, 24, 23, 45), 4)]
    assert ends == [utc(2026, 10, 25, h, 30) for h in (0, 1, 2, 3)]


def test_every_that_does_not_divide_a_day_counts_from_the_epoch_in_utc() -> None:
    """`every = 7h` cannot align to midnight: its grid is k * 7h since 1970-01-01 UTC."""
    sched = schedule(every="7h", timezone="Europe/Berlin")
    end = sched.next_end(utc(2026, 11, 28))
    assert int(end.timestamp()) % (7 * 3600) == 0
    assert sched.previous_end(end) == end - 7 * H


@pytest.mark.parametrize(
    ("values", "key"),
    [({"every": "1500ms"}, "schedule.every"), ({"cron": "0 */4 * *"}, "schedule.cron")],
)
def test_unusable_schedule_is_a_config_error_naming_the_key(
    values: dict[str, str], key: str
) -> None:
    """A sub-second period or a broken crontab line fails when the config loads, naming the key."""
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping({"schedule": values}, plugins=PLUGINS, env={})
    assert raised.value.key == key


def test_first_start_judges_only_the_window_due_now() -> None:
    """With an empty run log, nothing was missed: only the due window is judged."""
    plan = catch_up(schedule(every="4h"), None, utc(2026, 11, 28, 9), 6)
    assert plan.ends == (utc(2026, 11, 28, 8),) and plan.skipped == 0


def test_nothing_to_do_when_the_due_window_was_judged() -> None:
    """A restart inside the same window judges nothing again."""
    plan = catch_up(schedule(every="4h"), utc(2026, 11, 28, 8), utc(2026, 11, 28, 11), 6)
    assert plan.ends == () and plan.skipped == 0


def test_missed_windows_are_judged_oldest_first() -> None:
    """Down from 01:00 to 16:30: the windows ending 04, 08, 12 and 16 are judged in order."""
    plan = catch_up(schedule(every="4h"), utc(2026, 11, 28, 0), utc(2026, 11, 28, 16, 30), 6)
    assert plan.ends == tuple(utc(2026, 11, 28, h) for h in (4, 8, 12, 16))
    assert plan.skipped == 0


def test_catch_up_beyond_max_catchup_skips_the_oldest_and_counts_them() -> None:
    """max_catchup 2: the two newest missed windows and the due one; the rest counted."""
    plan = catch_up(schedule(every="4h"), utc(2026, 11, 27, 0), utc(2026, 11, 28, 16, 30), 2)
    assert plan.ends == tuple(utc(2026, 11, 28, h) for h in (8, 12, 16))
    assert plan.skipped == 7  # 27th 04:00 ... 28th 04:00
    assert plan.skipped_from == utc(2026, 11, 27, 4)
    assert plan.skipped_to == utc(2026, 11, 28, 4)


def test_catch_up_counts_a_day_of_two_second_windows_exactly() -> None:
    """A day down on a 2s schedule: 43200 windows missed, max_catchup judged, the rest counted."""
    start = utc(2026, 11, 28)
    plan = catch_up(schedule(every="2s"), start, start + 24 * H, 6)
    assert len(plan.ends) == 7 and plan.ends[-1] == start + 24 * H
    assert plan.skipped + len(plan.ends) == 43200


def test_catch_up_across_a_dst_change_keeps_wall_clock_windows() -> None:
    """Down over the spring change: the catch-up list holds the 3-hour window too."""
    sched = schedule(every="4h", timezone="Europe/Berlin")
    last = SPRING.astimezone(UTC)  # 00:00 local judged
    plan = catch_up(sched, last, (SPRING + 9 * H).astimezone(UTC), 6)
    lengths = [(end - sched.previous_end(end)) / H for end in plan.ends]
    assert lengths == [3.0, 4.0]


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]
PERIODS = ["2s", "1m", "15m", "1h", "4h", "1d", "7h"]


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    every=st.sampled_from(PERIODS),
    offset_s=st.integers(min_value=0, max_value=2 * 365 * 86400),
)
def test_windows_tile_and_each_end_is_the_last_one_at_or_before_it(
    zone: str, every: str, offset_s: int
) -> None:
    """Property: next_end and last_end agree and windows never overlap, in any zone."""
    sched = schedule(every=every, timezone=zone)
    t = utc(2025, 1, 1) + timedelta(seconds=offset_s)
    end = sched.next_end(t)
    assert end > t
    assert sched.last_end(end) == end
    assert sched.last_end(end - S) <= t
    following = sched.next_end(end)
    assert sched.previous_end(following) == end
