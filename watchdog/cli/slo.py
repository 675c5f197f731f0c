"""`memory-watchdog slo backfill [--from] [--to]`: judge the SLO buckets of a range not judged
yet, with progress on stderr; resumable, as it skips the judged ones (docs/slo.md#the-ledger).
"""

from __future__ import annotations

import argparse
import sys
import time

from watchdog.cli.args import PROG, Subparsers, common_arguments, judged, load, time_flag
from watchdog.cli.epilog import DONE, STORE, USAGE, helped
from watchdog.core.errors import UsageError
from watchdog.core.store import open_configured
from watchdog.core.text import plural
from watchdog.core.times import rfc3339, system_clock
from watchdog.runner.slo import backfill

BACKFILL_EXAMPLES = (
    ("slo backfill", "judge every bucket of the longest period not judged yet, up to now"),
    (
        "slo backfill --from 2026-11-01T00:00:00Z --to 2026-11-28T00:00:00Z",
        "judge the buckets of a range (run again after an interruption: it resumes)",
    ),
)
BACKFILL_EXITS = (DONE, (1, "some buckets could not be judged: run it again"), USAGE, STORE)


def add_slo(sub: Subparsers) -> None:
    p = sub.add_parser(
        "slo",
        help="service level objectives: judge their buckets (backfill)",
        **helped(BACKFILL_EXAMPLES, BACKFILL_EXITS),
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    fill = actions.add_parser(
        "backfill",
        help="judge the SLO buckets of a range not judged yet (resumable)",
        **helped(BACKFILL_EXAMPLES, BACKFILL_EXITS),
    )
    common_arguments(fill)
    fill.add_argument(
        "--from", dest="start", help="RFC 3339 start (default: the longest period ago)"
    )
    fill.add_argument("--to", dest="end", help="RFC 3339 end (default: now)")
    fill.set_defaults(run=cmd_slo_backfill)

    def missing_action(args: argparse.Namespace) -> int:
        raise UsageError("slo: an action is required (backfill)")

    p.set_defaults(run=missing_action)


def cmd_slo_backfill(args: argparse.Namespace) -> int:
    now = system_clock()
    settings = judged(load(args))
    end = time_flag("--to", args.end) if args.end else now
    periods = [t.period for t in settings.slo.enabled.values()]
    if not periods:
        raise UsageError("slo backfill: no SLO is enabled ([slo.<name>] enabled = true)")
    start = time_flag("--from", args.start) if args.start else end - max(periods)
    if start >= end:
        raise UsageError(f"--from: {rfc3339(start)} is not before --to {rfc3339(end)}")
    began = time.monotonic()

    def progress(done: int, total: int) -> None:
        print(f"{PROG}: slo backfill: {done}/{total} buckets judged", file=sys.stderr)

    with open_configured(settings.store) as store:
        done = backfill(store, settings, start, end, now, progress)
    print(
        f"judged {plural(done.judged, 'SLO bucket')} from {rfc3339(start)} to {rfc3339(end)}"
        f" in {plural(done.passes, 'pass', 'passes')} ({time.monotonic() - began:.1f}s)"
        + (f"; {done.failed} could not be judged: run it again" if done.failed else "")
    )
    return 1 if done.failed else 0
