"""`memory-watchdog backtest`: every window of a past period, judged in one pass, read-only.

The windows are those the schedule aligns (`schedule.every` or `cron`, in
`schedule.timezone`) whose end lies in `(--from, --to]`; each is judged as
`check --at <its end>` judges it, and each scan of the checks reads the
period's events once for all of them (watchdog.runner.backtest). Nothing is
written: no alert state, no run record, no watermark. The report says per
check how it would have behaved (watchdog.report.backtest); exit 0 when no
window breached, 1 when one did (or could not be judged), 2 and 3 as for
`check` (docs/spec.md#9-looking-back-backtest-and-explain).
"""

from __future__ import annotations

import argparse
from datetime import datetime

from watchdog.cli.args import (
    Subparsers,
    common_arguments,
    duration_flag,
    emit,
    judged,
    load,
    time_flag,
)
from watchdog.cli.epilog import STORE, USAGE, helped
from watchdog.core.errors import UsageError
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.store import open_configured
from watchdog.core.times import rfc3339, system_clock
from watchdog.report.backtest import (
    Backtest,
    Running,
    render_backtest_json,
    render_backtest_text,
    summarize,
)
from watchdog.report.backtest_page import render_backtest_page
from watchdog.report.page import reproduce_command
from watchdog.runner.backtest import run_windows, windows_ending
from watchdog.runner.once import run_once, window_at

FORMATS = ("text", "json", "html")
# A year of 4h windows is 2,190; more windows than this is a period to split.
MAX_WINDOWS = 3000


def add_backtest(sub: Subparsers) -> None:
    p = sub.add_parser(
        "backtest",
        help="judge every window of a past period in one pass, read-only",
        **helped(
            (
                (
                    "backtest --from 2026-11-21T00:00:00Z --to 2026-11-28T00:00:00Z",
                    "every window of a week, as `check --at` judges each",
                ),
                ("backtest --last 7d --format json", "the week up to now, as JSON"),
                ("backtest --last 30d --format html --output backtest.html", "a month, as a page"),
            ),
            (
                (0, "no window breached"),
                (1, "a window breached, or a check could not be evaluated"),
                USAGE,
                STORE,
            ),
        ),
    )
    common_arguments(p)
    p.add_argument("--from", dest="start", help="judge windows ending after this time (RFC 3339)")
    p.add_argument("--to", dest="end", help="... up to this time (RFC 3339; default: now)")
    p.add_argument("--last", help="the period ending --to (default now), e.g. 7d")
    p.add_argument(
        "--partial",
        action="store_true",
        help="also judge the window still running at --to, so far (marked; not in the summary)",
    )
    p.add_argument("--format", default="text", help="text | json | html")
    p.add_argument("--output", help="write the result to this file instead of stdout")
    p.set_defaults(run=cmd_backtest)


def period(args: argparse.Namespace, now: datetime) -> tuple[datetime, datetime]:
    """(from, to) of the command line: --from TIME or --last DURATION, up to --to or now."""
    if bool(args.start) == bool(args.last):
        raise UsageError("backtest: give exactly one of --from TIME or --last DURATION")
    end = time_flag("--to", args.end) if args.end else now
    start = (
        time_flag("--from", args.start) if args.start else end - duration_flag("--last", args.last)
    )
    if start >= end:
        raise UsageError(f"--from: {rfc3339(start)} is not before --to {rfc3339(end)}")
    return start, end


def running_at(schedule: Schedule, end: datetime) -> Running | None:
    """The schedule's window that `end` falls inside (None when `end` is a window end)."""
    start = schedule.last_end(end)
    if start == end:
        return None
    closes = schedule.next_end(end)
    return Running(start, closes, closes + schedule.delay)


def window_ends(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    running: Running | None = None,
    partial: bool = False,
) -> list[datetime]:
    """The schedule's window ends in (start, end]; a usage error when too many, or none
    (unless the `running` window is to be judged alone, `partial`)."""
    ends = schedule.ends_between(start, end, MAX_WINDOWS + 1)
    if not ends and not (partial and running is not None):
        raise UsageError(
            f"backtest: no window of the schedule ({schedule.describe()}) ends in"
            f" ({rfc3339(start)}, {rfc3339(end)}]: choose a longer period"
            + (
                f", or --partial judges the window running since {rfc3339(running.start)}"
                if running is not None
                else ""
            )
        )
    if len(ends) > MAX_WINDOWS:
        raise UsageError(
            f"backtest: more than {MAX_WINDOWS} windows of {schedule.describe()} end in"
            f" ({rfc3339(start)}, {rfc3339(end)}]: choose a shorter period"
        )
    return ends


def cmd_backtest(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"--format: {args.format!r} is not accepted (accepted: text, json, html)")
    start, end = period(args, system_clock())
    settings = judged(load(args))
    schedule = Schedule.from_settings(settings.schedule)
    running = running_at(schedule, end)
    ends = window_ends(schedule, start, end, running=running, partial=args.partial)
    triage = args.format == "json"  # each window's report is `check --format json`'s
    with open_configured(settings.store) as store:
        reports = (
            run_windows(store, settings, windows_ending(settings, ends), triage=triage)
            if ends
            else []
        )
        partial = None
        if args.partial and running is not None:  # as `check --at <--to> --window <so far>`
            window = window_at(settings, end, end - running.start)
            partial = run_once(store, settings, window, triage=triage)
    backtest = summarize(start, end, reports, running=running, partial=partial)
    emit(render(backtest, args.format, settings), args.output)
    return 0 if backtest.healthy else 1


def render(backtest: Backtest, fmt: str, settings: Settings) -> str:
    if fmt == "json":
        return render_backtest_json(backtest)
    if fmt == "html":
        return render_backtest_page(backtest, settings)
    breached = backtest.breached_windows
    how = reproduce_command(breached[0], settings) if breached else ""
    return render_backtest_text(backtest, how_to_check=how)
