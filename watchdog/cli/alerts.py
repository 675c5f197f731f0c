"""The alerting subcommands: `silence`, `alerts`, `notify-test`, and `check --notify`.

`watchdog.cli.main` registers the `add_*` functions in its COMMANDS dict and calls
`notify_after_check` / `notify_store_error` from `check --notify`. Output
goes to stdout, problems to stderr as one line each; secrets are masked
everywhere (notifiers describe themselves masked, SecretStr hides the rest).
Heavy imports wait until a command runs, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from checks.base import Report, Window, rfc3339
from watchdog.core.durations import parse_duration
from watchdog.core.errors import StoreError, UsageError, WatchdogError
from watchdog.core.settings import Settings
from watchdog.core.store import open_configured

PROG = "memory-watchdog"


def _now() -> datetime:
    return datetime.now(UTC)


def _common(parser: argparse.ArgumentParser) -> None:
    from watchdog.cli.main import common_arguments  # cli imports this module

    common_arguments(parser)


def _load(args: argparse.Namespace) -> Settings:
    from watchdog.cli.main import load

    return load(args)


def _err(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr)


def _when(moment: datetime | None) -> str:
    return rfc3339(moment) if moment is not None else "—"


# --- check --notify --------------------------------------------------------------------------


def notify_after_check(
    settings: Settings, report: Report, *, duration_s: float | None = None
) -> None:
    """Run the alert pipeline after `check`; report on stderr; never raise a chat problem.

    A broken custom template is a ConfigError and does raise (exit 2); the
    watchdog's own tables failing is printed, and `check` keeps its exit code.
    """
    from alerts.pipeline import process

    try:
        with open_configured(settings.store) as store:
            outcome = process(store, settings, report, now=_now(), duration_s=duration_s)
    except StoreError as exc:
        _err(f"alerts: could not keep alert state: {exc}")
        return
    _err(outcome.summary())
    for line in outcome.errors:
        _err(line)


def notify_store_error(
    settings: Settings, at: datetime, length: timedelta | None, problem: StoreError
) -> None:
    """After `check --notify` could not read the source: fire the `store` alert, if we can."""
    from alerts.pipeline import process_store_error

    window = Window(
        at=at.astimezone(UTC),
        length=length or settings.window.length,
        lookback=settings.window.lookback,
    )
    try:
        with open_configured(settings.store) as store:
            outcome = process_store_error(store, settings, window, problem.problem, now=_now())
    except WatchdogError as exc:
        _err(f"alerts: could not record the store error either: {exc}")
        return
    _err(outcome.summary())
    for line in outcome.errors:
        _err(line)


# --- notify-test -----------------------------------------------------------------------------


def add_notify_test(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "notify-test", help="send one test message through every configured notifier"
    )
    _common(p)
    p.set_defaults(run=cmd_notify_test)


def cmd_notify_test(args: argparse.Namespace) -> int:
    from alerts.base import Deadline, DeliveryError, Message
    from alerts.notifiers import build_notifiers
    from alerts.render import templates
    from alerts.state import source_name
    from watchdog.core.errors import ConfigError

    settings = _load(args)
    notifiers = build_notifiers(settings)
    if not notifiers:
        raise ConfigError(
            "alerts", "no notifier is configured (add [alerts.slack] or [alerts.stdout])"
        )
    renderer = templates(settings.alerts.templates_dir)
    failed = 0
    for name, notifier in notifiers.items():
        rendered = renderer.test_message(source_name(settings), name, _now())
        message = Message(
            id="test", text=rendered.text, blocks=rendered.blocks, plain=rendered.plain
        )
        try:
            notifier.send(message, Deadline(settings.alerts.delivery_timeout))
        except DeliveryError as exc:
            failed += 1
            print(f"{notifier.describe()}: FAILED: {exc.problem}")
            continue
        print(f"{notifier.describe()}: sent")
    return 1 if failed else 0


# --- alerts ----------------------------------------------------------------------------------


def add_alerts(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("alerts", help="list alert states, silences and the outbox")
    _common(p)
    p.add_argument("--format", default="text", choices=("text", "json"), help="text | json")
    p.set_defaults(run=cmd_alerts)


def _state_label(record: Any, pending_runs: int) -> str:
    alert = record.alert
    if alert.pending:
        return f"pending {alert.streak}/{pending_runs}"
    return str(alert.state.value)


def cmd_alerts(args: argparse.Namespace) -> int:
    from alerts.state import alert_states, outbox_backlog

    settings = _load(args)
    now = _now()
    with open_configured(settings.store) as store:
        records = alert_states(store, settings, now=now)
        backlog = outbox_backlog(store, settings, now=now)
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
                    "last_evaluated": _when(r.alert.last_at),
                    "last_notified": _when(r.alert.last_notified_at),
                    "silenced_until": _when(r.silenced_until) if r.silenced_until else None,
                    "pending_outbox": r.pending_outbox,
                }
                for r in records
            ],
            "outbox": [
                {
                    "notifier": b.notifier,
                    "pending": b.pending,
                    "held": b.held,
                    "oldest_pending": _when(b.oldest_pending) if b.oldest_pending else None,
                    "delivered": b.delivered,
                    "dropped": b.dropped,
                    "rejected": b.rejected,
                }
                for b in backlog
            ],
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return 0
    if not records:
        print("No alert state yet: run `memory-watchdog check --notify` (or the daemon) first.")
    else:
        rows = [("SOURCE", "CHECK", "STATE", "SINCE", "LAST NOTIFIED", "SILENCED UNTIL", "OUTBOX")]
        for r in records:
            a = r.alert
            state = _state_label(r, settings.alerts.pending_runs)
            if a.firing and a.cause == "error":
                state += " (error)"
            rows.append(
                (
                    a.source,
                    a.check_id,
                    state,
                    _when(a.fired_at if a.firing else a.since),
                    _when(a.last_notified_at),
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
            f" {b.dropped} dropped, {b.rejected} rejected"
        )
    return 0


# --- silence ---------------------------------------------------------------------------------


def add_silence(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "silence", help="hold an alert's notifications for a while (add, list, remove)"
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))

    add = actions.add_parser("add", help="silence a check (or all) for a duration or until a time")
    _common(add)
    add.add_argument("check", metavar="CHECK_ID|all", help="a check id, store, or all")
    add.add_argument("--for", dest="duration", help="how long, e.g. 2h")
    add.add_argument("--until", help="until this RFC 3339 time")
    add.add_argument("--reason", required=True, help="why (shown in silence list)")
    add.add_argument("--by", help="who (default: the current user)")
    add.set_defaults(run=cmd_silence_add)

    listing = actions.add_parser("list", help="silences in force (all with --all)")
    _common(listing)
    listing.add_argument("--all", action="store_true", help="include expired and removed silences")
    listing.set_defaults(run=cmd_silence_list)

    remove = actions.add_parser("remove", help="end a silence now")
    _common(remove)
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
    from alerts.lifecycle import STORE_CHECK
    from alerts.silences import ALL, add_silence
    from checks.builtin import configured_checks
    from watchdog.cli.main import parse_time

    settings = _load(args)
    accepted = [spec.id for spec in configured_checks(settings)] + [STORE_CHECK, ALL]
    if args.check not in accepted:
        raise UsageError(
            f"silence add: unknown check {args.check!r} (accepted: {', '.join(accepted)})"
        )
    if bool(args.duration) == bool(args.until):
        raise UsageError("silence add: give exactly one of --for DURATION or --until TIME")
    now = _now().replace(microsecond=0)
    if args.duration:
        try:
            length = parse_duration(args.duration)
        except ValueError as exc:
            raise UsageError(f"--for: {exc}") from None
        ends_at = now + length
    else:
        try:
            ends_at = parse_time(args.until)
        except UsageError as exc:
            raise UsageError(str(exc).replace("--at", "--until")) from None
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
        f" by {silence.created_by}: {silence.reason}"
    )
    return 0


def cmd_silence_list(args: argparse.Namespace) -> int:
    from alerts.silences import list_silences

    settings = _load(args)
    now = _now()
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
                s.created_by,
                state,
                s.reason,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_silence_remove(args: argparse.Namespace) -> int:
    from alerts.silences import remove_silence

    settings = _load(args)
    with open_configured(settings.store) as store:
        removed = remove_silence(store, settings, args.id, _now())
    if removed is None:
        raise UsageError(
            f"silence remove: no silence {args.id!r} in force (see {PROG} silence list)"
        )
    print(f"silence {removed.id} removed: {removed.check_id} notifies again from the next run")
    return 0
