"""`memory-watchdog silence add|list|remove`: hold an alert's notifications, as in Alertmanager.

What a silence holds back and what it does not: docs/alerts.md#silences.
"""

from __future__ import annotations

import argparse
import getpass

from alerts.lifecycle import RUN_CHECK, STORE_CHECK
from alerts.silences import ALL, add_silence, list_silences, remove_silence
from watchdog.cli.args import (
    Subparsers,
    common_arguments,
    duration_flag,
    load,
    printed,
    time_flag,
)
from watchdog.cli.epilog import PLAIN_EXITS, helped
from watchdog.core.errors import UsageError
from watchdog.core.store import open_configured
from watchdog.core.text import printable
from watchdog.core.times import rfc3339, system_clock

ADD_EXAMPLES = (
    (
        'silence add recall_coverage --for 2h --reason "deploying the recall fix"',
        "hold one check's notifications for two hours",
    ),
    (
        'silence add all --until 2027-06-01T09:00:00Z --reason "maintenance"',
        "hold everything until a time",
    ),
)
LIST_EXAMPLES = (("silence list --all", "the silences, expired and removed ones too"),)
REMOVE_EXAMPLES = (("silence remove 0525e140", "end a silence now (its id from silence list)"),)


def add_silence_commands(sub: Subparsers) -> None:
    p = sub.add_parser(
        "silence",
        help="hold an alert's notifications for a while (add, list, remove)",
        **helped((*ADD_EXAMPLES, *LIST_EXAMPLES, *REMOVE_EXAMPLES), PLAIN_EXITS),
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))

    add = actions.add_parser(
        "add",
        help="silence a check (or all) for a duration or until a time",
        **helped(ADD_EXAMPLES, PLAIN_EXITS),
    )
    common_arguments(add)
    add.add_argument("check", metavar="CHECK_ID|all", help="a check id, store, or all")
    add.add_argument("--for", dest="duration", help="how long, e.g. 2h")
    add.add_argument("--until", help="until this RFC 3339 time")
    add.add_argument("--reason", required=True, help="why (shown in silence list)")
    add.add_argument("--by", help="who (default: the current user)")
    add.set_defaults(run=cmd_silence_add)

    listing = actions.add_parser(
        "list", help="silences in force (all with --all)", **helped(LIST_EXAMPLES, PLAIN_EXITS)
    )
    common_arguments(listing)
    listing.add_argument("--all", action="store_true", help="include expired and removed silences")
    listing.set_defaults(run=cmd_silence_list)

    remove = actions.add_parser(
        "remove", help="end a silence now", **helped(REMOVE_EXAMPLES, PLAIN_EXITS)
    )
    common_arguments(remove)
    remove.add_argument("id", help="the silence id (see silence list)")
    remove.set_defaults(run=cmd_silence_remove)

    def missing_action(args: argparse.Namespace) -> int:
        raise UsageError("silence: an action is required (add, list, remove)")

    p.set_defaults(run=missing_action)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry, no LOGNAME: still allow silencing
        return "unknown"


def cmd_silence_add(args: argparse.Namespace) -> int:
    settings = load(args)
    accepted = [*settings.check_ids, STORE_CHECK, RUN_CHECK, ALL]
    if args.check not in accepted:
        raise UsageError(
            f"silence add: unknown check {args.check!r} (accepted: {', '.join(accepted)})"
        )
    if bool(args.duration) == bool(args.until):
        raise UsageError("silence add: give exactly one of --for DURATION or --until TIME")
    now = system_clock().replace(microsecond=0)
    if args.duration:
        ends_at = now + duration_flag("--for", args.duration)
    else:
        ends_at = time_flag("--until", args.until)
    if ends_at <= now:
        raise UsageError(f"silence add: the silence would end in the past ({rfc3339(ends_at)})")
    if not args.reason.strip():
        raise UsageError("silence add: --reason must say why")
    with open_configured(settings.store) as store:
        silence = add_silence(
            store,
            settings,
            check_id=args.check,
            ends_at=ends_at,
            reason=args.reason.strip(),
            created_by=args.by or _user(),
            now=now,
        )
    print(
        f"silence {silence.id}: {silence.check_id} silenced until {rfc3339(silence.ends_at)}"
        f" by {printable(silence.created_by, 64)}: {printable(silence.reason, 300)}"
    )
    return 0


def cmd_silence_list(args: argparse.Namespace) -> int:
    settings = load(args)
    now = system_clock()
    with open_configured(settings.store) as store:
        silences = list_silences(store, settings)
    shown = silences if args.all else [s for s in silences if s.active(now)]
    if not shown:
        print("No silence in force." if not args.all else "No silence.")
        return 0
    rows = [("ID", "CHECK", "FROM", "UNTIL", "BY", "STATE", "REASON")]
    for s in shown:
        state = "active" if s.active(now) else ("removed" if s.removed_at else "expired")
        if s.starts_at > now and s.removed_at is None:
            state = "scheduled"
        rows.append(
            (
                s.id,
                s.check_id,
                rfc3339(s.starts_at),
                rfc3339(s.ends_at),
                printable(s.created_by, 64),
                state,
                printable(s.reason, 300),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_silence_remove(args: argparse.Namespace) -> int:
    settings = load(args)
    with open_configured(settings.store) as store:
        removed = remove_silence(store, settings, args.id, system_clock())
    if removed is None:
        raise UsageError(
            f"silence remove: no silence {args.id!r} in force"
            f" (see {printed(settings, 'silence list')})"
        )
    print(f"silence {removed.id} removed: {removed.check_id} notifies again from the next run")
    return 0
