"""`memory-watchdog status`: last runs, firing alerts, outbox backlog, next run; a health check.

`--max-age DURATION` makes it a dead man's switch for whatever watches the watchdog (cron, a
systemd timer, an uptime checker): exit 0 when the last completed run (one that read the
source) judged a window ending within DURATION, 1 when it judged one ending longer ago or none
was ever judged, 2 or 3 when it cannot tell (the command line or the config is wrong; the store,
and so the run log, cannot be read). It only reads: no table is created
(docs/operations.md#is-the-watchdog-alive-status-and---max-age).
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from watchdog.cli.args import Subparsers, common_arguments, duration_flag, judged, load
from watchdog.cli.epilog import STORE, USAGE, helped
from watchdog.core import jsontext
from watchdog.core.errors import UsageError
from watchdog.core.logs import said
from watchdog.core.store import open_configured
from watchdog.core.times import system_clock
from watchdog.daemon.status import read_status, render_text

FORMATS = ("text", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", default="text", help="text | json")
    parser.add_argument(
        "--max-age",
        help="a health check (e.g. 4h30m): exit 0 fresh, 1 stale (no window judged within it),"
        " 2 or 3 cannot tell (config or usage error; unreadable store)",
    )
    parser.add_argument("--runs", type=int, default=10, help="how many runs to list (default 10)")


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status; with --max-age, exit 1 when the last completed run is too old."""
    if args.format not in FORMATS:
        raise UsageError(f"--format: {args.format!r} is not accepted (accepted: text, json)")
    if args.runs < 0:
        raise UsageError("--runs: must be 0 or more")
    max_age: timedelta | None = duration_flag("--max-age", args.max_age) if args.max_age else None
    settings = judged(load(args))
    now = system_clock()
    with open_configured(settings.store) as store:
        status = read_status(store, settings, now, args.runs)
    if args.format == "json":
        sys.stdout.write(jsontext.dumps(status.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(status))
    problem = status.staleness(max_age) if max_age is not None else None
    if problem is not None:
        said(f"stale: {problem} (--max-age {args.max_age})")
        return 1
    return 0


def add_status(sub: Subparsers) -> None:
    """Register `memory-watchdog status` (the CLI's COMMANDS registry calls this)."""
    p = sub.add_parser(
        "status",
        help="last runs, firing alerts, outbox backlog, next run; --max-age as a health check",
        **helped(
            (
                ("status", "the last runs, the alerts firing, the outbox, the next run"),
                ("status --max-age 9h", "a dead man's switch: exit 1 when no window was judged"),
                ("status --format json --runs 20", "the last 20 runs, as JSON"),
            ),
            (
                (0, "shown; with --max-age: the last live run judged a window within the age"),
                (1, "with --max-age: stale (older, or no run at all)"),
                USAGE,
                STORE,
            ),
        ),
    )
    common_arguments(p)
    add_arguments(p)
    p.set_defaults(run=cmd_status)
