"""`memory-watchdog explain SESSION_ID [--at TIME]`: why a session counted, event by event (an
event id, as the evidence lists them, explains that event's session with the event marked).

It reads what `check --at` reads (the lookback before `--at`, default now):
the session's events, what each check counts against them, and each
obligation the session had, with the check and the window of the schedule
that counted it (watchdog.report.explain). Read-only. Exit 0 with the
explanation, 1 when the session has no event in the lookback (one line), 2
for a bad command line or config (an id that cannot be a session among
them), 3 when the store cannot be read
(docs/spec.md#9-looking-back-backtest-and-explain).
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

from checks.base import Window
from watchdog.cli.args import (
    Subparsers,
    common_arguments,
    duration_flag,
    emit,
    judged,
    load,
    printed,
    time_flag,
)
from watchdog.cli.epilog import STORE, USAGE, helped
from watchdog.core.errors import UsageError, WatchdogError
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.store import open_configured
from watchdog.core.text import printable
from watchdog.core.times import rfc3339, system_clock
from watchdog.report.explain import WindowOf, render_explain_json, render_explain_text
from watchdog.runner.explain import explain

FORMATS = ("text", "json")
MAX_ID_CHARS = 65_536  # longer is no session id a source keeps


class NoSuchSession(WatchdogError):
    """The session has no event in the lookback (exit 1, one line)."""

    exit_code = 1


def add_explain(sub: Subparsers) -> None:
    p = sub.add_parser(
        "explain",
        help="one session's events and obligations, and what counted",
        **helped(
            (
                ("explain 5b0e1f2a-demo", "a session's events and obligations, as of now"),
                (
                    "explain 5b0e1f2a-demo --at 2026-11-28T04:00:00Z --format json",
                    "as the check at that time saw it, as JSON",
                ),
            ),
            (
                (0, "the session explained"),
                (1, "the session has no event in the lookback before --at"),
                USAGE,
                STORE,
            ),
        ),
    )
    p.add_argument(
        "session_id",
        metavar="SESSION_ID",
        help="the session to explain, or an event id (its session, the event marked)",
    )
    common_arguments(p)
    p.add_argument("--at", help="as a check at this time sees it, RFC 3339 (default: now)")
    p.add_argument(
        "--window",
        help="the length of the window that check judged, e.g. 4h (default: the schedule's period)",
    )
    p.add_argument("--format", default="text", help="text | json")
    p.add_argument("--output", help="write the explanation to this file instead of stdout")
    p.set_defaults(run=cmd_explain)


def session_id_of(text: str, settings: Settings) -> str:
    """The session id argument, or a usage error saying why it cannot be one."""
    shown = printable(text, 80)
    if len(text) > MAX_ID_CHARS:
        raise UsageError(f"explain: the session id is over {MAX_ID_CHARS} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"explain: the session id '{shown}' is not valid UTF-8") from None
    if text in settings.source.ignore_sessions:
        raise UsageError(
            f"explain: '{shown}' is no session: source.ignore_sessions lists it"
            " (its events belong to no session)"
        )
    return text


def window_of(settings: Settings, judged: Window | None = None) -> WindowOf:
    """The window that judges a deadline: `judged` (the window `check --at` judges, sized to a
    check's own length) when the deadline falls in it, else the schedule's first to end
    after it."""
    schedule = Schedule.from_settings(settings.schedule)

    def found(deadline: datetime, window_ms: int | None) -> tuple[datetime, datetime]:
        if judged is not None:
            own = judged.sized(window_ms)
            if own.start <= deadline < own.end:
                return own.start, own.end
        end = schedule.next_end(deadline)
        if window_ms is None:
            return schedule.previous_end(end), end
        return end - timedelta(milliseconds=window_ms), end

    return found


def cmd_explain(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"--format: {args.format!r} is not accepted (accepted: text, json)")
    at = time_flag("--at", args.at) if args.at else system_clock()
    length = duration_flag("--window", args.window) if args.window else None
    settings = judged(load(args))
    session_id = session_id_of(args.session_id, settings)
    with open_configured(settings.store) as store:
        explained = explain(store, settings, session_id, at, length)
    if not explained.events and explained.marked:
        raise NoSuchSession(
            f"explain: event '{printable(session_id, 80)}' belongs to no session (its session"
            " id is empty or listed in source.ignore_sessions)"
        )
    if not explained.events:
        raise NoSuchSession(
            f"explain: session '{printable(session_id, 80)}' has no event in the lookback"
            f" {rfc3339(explained.window.read_from)} .. {rfc3339(at)}, nor is it an event's id"
            f" (an earlier --at? see {printed(settings, 'check --format json')}"
            " for the sessions and events of a window)"
        )
    source = settings.source.display_name
    render = render_explain_json if args.format == "json" else render_explain_text
    window = window_of(settings, explained.window)
    emit(render(explained, source, settings.events, window), args.output)
    return 0
