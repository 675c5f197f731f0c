"""`memory-watchdog alerts` and `notify-test`: what the alerts are doing, and whether chat works.

Output goes to stdout, problems to stderr as one line each; secrets are
masked everywhere (notifiers describe themselves masked, SecretStr hides the rest).
What each prints: docs/alerts.md#the-alert-lifecycle and docs/alerts.md#configure-slack.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from datetime import datetime

from alerts.base import Deadline, DeliveryError, Message
from alerts.facts import notify_test_facts
from alerts.lease import current_lease
from alerts.notifiers import build_notifiers
from alerts.records import AlertRecord, alert_states, outbox_backlog
from alerts.render import templates
from alerts.state import clear_source, source_rows
from checks.base import Severity
from watchdog.cli.args import Subparsers, common_arguments, judged, load, printed, require_secrets
from watchdog.cli.epilog import PLAIN_EXITS, STORE, helped
from watchdog.core import jsontext
from watchdog.core.errors import ConfigError, UsageError
from watchdog.core.store import open_configured
from watchdog.core.text import printable
from watchdog.core.times import rfc3339, system_clock


def _when(moment: datetime | None) -> str:
    return rfc3339(moment) if moment is not None else "—"


# --- notify-test -----------------------------------------------------------------------------


def add_notify_test(sub: Subparsers) -> None:
    p = sub.add_parser(
        "notify-test",
        help="send one test message through every configured receiver"
        " (webhook and PagerDuty: a test alert that fires and resolves)",
        **helped(
            (("notify-test --config watchdog.toml", "one test message through each receiver"),),
            (
                (0, "every receiver took its message"),
                (1, "a receiver failed (each one's problem on a line)"),
                (2, "usage or config error, a receiver's secret not set"),
                STORE,
            ),
        ),
    )
    common_arguments(p)
    p.set_defaults(run=cmd_notify_test)


def cmd_notify_test(args: argparse.Namespace) -> int:
    settings = judged(load(args))  # the source `status` and `alerts` name, the one alerts are of
    require_secrets(settings)
    notifiers = build_notifiers(settings)
    if not notifiers:
        raise ConfigError(
            "alerts", f"no receiver is configured (add one of {settings.plugins.receiver_tables()})"
        )
    renderer = templates(settings.alerts.templates_dir)
    machine = {name for name, receiver in settings.alerts.receivers().items() if receiver.machine}
    failed = 0
    for name, notifier in notifiers.items():
        now = system_clock()
        source = settings.source.display_name
        rendered = renderer.test_message(source, name, now)
        firing, resolved = notify_test_facts(source, name, now)
        messages = [
            Message(
                id="test",
                text=rendered.text,
                blocks=rendered.blocks,
                plain=rendered.plain,
                severity=Severity.INFO,
                alerts=(firing,),
            )
        ]
        if name in machine:  # resolve the test alert: no incident stays open
            messages.append(replace(messages[0], id="test-resolved", alerts=(resolved,)))
        try:
            for message in messages:
                notifier.send(message, Deadline(settings.alerts.delivery_timeout))
        except DeliveryError as exc:
            failed += 1
            print(f"{notifier.describe()}: FAILED: {exc.problem}")
            continue
        print(
            f"{notifier.describe()}: sent" + (" (fired and resolved)" if len(messages) > 1 else "")
        )
    return 1 if failed else 0


# --- alerts ----------------------------------------------------------------------------------


def add_alerts(sub: Subparsers) -> None:
    p = sub.add_parser(
        "alerts",
        help="list alert states, silences and the outbox (reset: start a source's alerts over)",
        **helped(
            (
                ("alerts", "each alert's state, the silences, the outbox"),
                ("alerts --format json", "the same, as JSON"),
                ("alerts reset", "say what starting the source's alerts over would clear"),
                ("alerts reset --yes", "clear them, so `check --notify --at` judges again"),
            ),
            PLAIN_EXITS,
        ),
    )
    common_arguments(p)
    p.add_argument(
        "action",
        nargs="?",
        choices=("reset",),
        metavar="reset",
        help="reset: clear the alert states, run log and outbox of the source (--source NAME,"
        " or --all), so that `check --notify --at` judges its times again; never the telemetry",
    )
    p.add_argument("--format", default="text", choices=("text", "json"), help="text | json")
    p.add_argument("--source", help="reset: this source (default: the one the commands judge)")
    p.add_argument("--all", action="store_true", help="reset: every source in the store")
    p.add_argument("--yes", action="store_true", help="reset: clear them (default: only say what)")
    p.set_defaults(run=cmd_alerts)


def _state_label(record: AlertRecord, pending_runs: int) -> str:
    alert = record.alert
    if alert.pending:
        return f"pending {alert.streak}/{pending_runs}"
    return str(alert.state.value)


def cmd_alerts(args: argparse.Namespace) -> int:
    if args.action == "reset":
        return cmd_alerts_reset(args)
    for flag, given in (("--source", args.source), ("--all", args.all), ("--yes", args.yes)):
        if given:
            raise UsageError(f"{flag}: only with `alerts reset`")
    settings = judged(load(args))
    now = system_clock()
    with open_configured(settings.store) as store:
        records = alert_states(store, settings, now=now)
        backlog = outbox_backlog(store, settings, now=now)
        lease = current_lease(store, settings, settings.source.display_name)
    if args.format == "json":
        document = {
            "alerts": [
                {
                    "source": r.alert.source,
                    "check": r.alert.check_id,
                    "state": r.alert.state.value,
                    "pending_runs": r.alert.streak if r.alert.pending else 0,
                    "cause": r.alert.cause if r.alert.firing else "",
                    "since": _when(r.alert.since),
                    "firing_since": _when(r.alert.fired_at) if r.alert.firing else None,
                    "last_status": r.alert.last_status,
                    "no_data_since": _when(r.alert.no_data_since)
                    if r.alert.no_data_since
                    else None,
                    "last_evaluated": _when(r.alert.last_at),
                    "last_notified": _when(r.last_delivered) if r.last_delivered else None,
                    "silenced_until": _when(r.silenced_until) if r.silenced_until else None,
                    "inhibited_by": r.alert.inhibited_by or None,
                    "pending_outbox": r.pending_outbox,
                }
                for r in records
            ],
            "outbox": [b.to_json() for b in backlog],
            "alert_lease": lease.to_json() if lease is not None else None,
        }
        sys.stdout.write(jsontext.dumps(document, indent=2) + "\n")
        return 0
    if not records:
        print(
            f"No alert state yet: run `{printed(settings, 'check --notify')}` (or the daemon) first."
        )
    else:
        rows = [("SOURCE", "CHECK", "STATE", "SINCE", "LAST NOTIFIED", "SILENCED UNTIL", "OUTBOX")]
        for r in records:
            a = r.alert
            state = _state_label(r, settings.alerts.pending_runs)
            if a.firing and a.cause in ("error", "no_data"):
                state += f" ({a.cause.replace('_', ' ')})"
            if a.inhibited_by:
                state += f", held by {printable(a.inhibited_by)}"
            rows.append(
                (
                    printable(a.source),
                    printable(a.check_id),
                    state,
                    _when(a.fired_at if a.firing else a.since),
                    _when(r.last_delivered),
                    _when(r.silenced_until),
                    str(r.pending_outbox) if r.pending_outbox else "—",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for b in backlog:
        oldest = f", oldest from {_when(b.oldest_pending)}" if b.oldest_pending else ""
        held = f" ({b.held} held by quiet hours)" if b.held else ""
        print(
            f"outbox {b.notifier}: {b.pending} pending{held}{oldest}; {b.delivered} delivered,"
            f" {b.dropped} dropped, {b.rejected} rejected{b.given_up()}"
        )
    if lease is not None:
        print(f"alert lease: {printable(lease.describe())}")
    return 0


# --- alerts reset ----------------------------------------------------------------------------

# How each table of alerts.state.SOURCE_TABLES is counted for people.
_CLEARED = {
    "alert_state": "alert states",
    "runs": "runs in the run log",
    "outbox": "outbox messages",
}


def cmd_alerts_reset(args: argparse.Namespace) -> int:
    """Start a source's alerts over: without --yes, say what would be cleared; with it, clear it."""
    if args.all and args.source:
        raise UsageError("--all: not with --source (one source, or every one)")
    if args.format != "text":
        raise UsageError("--format: `alerts reset` prints text only")
    settings = judged(load(args))
    source = None if args.all else (args.source or settings.source.display_name)
    whose = "every source" if source is None else f"source {printable(source)}"
    with open_configured(settings.store) as store:
        counts = (clear_source if args.yes else source_rows)(store, settings, source)
        where = f"{whose} in {store.url.masked}"
    listed = ", ".join(f"{n} {_CLEARED[name]}" for name, n in counts.items())
    if not args.yes:
        print(
            f"alerts reset would clear, of {where}: {listed}; the telemetry is not touched."
            f"\nTo clear them: {printed(settings, reset_command(args))} --yes"
        )
        return 0
    print(f"alerts reset: cleared, of {where}: {listed}; the telemetry was not touched.")
    return 0


def reset_command(args: argparse.Namespace) -> str:
    """The `alerts reset` of these flags, for people (without --yes)."""
    if args.all:
        return "alerts reset --all"
    return f"alerts reset --source {shlex.quote(args.source)}" if args.source else "alerts reset"
