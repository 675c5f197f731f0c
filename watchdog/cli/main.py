"""The command line (SPEC section 7): `memory-watchdog check|demo|...`.

Every `WatchdogError` becomes one line on stderr and the documented exit
code: 0 no breach, 1 a breach (or a check that could not run), 2 usage or
config, 3 the store could not be read. A traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

from checks.base import Report, Status
from checks.materialize import add_schema
from watchdog.cli.alerts import (
    add_alerts,
    add_notify_test,
    add_silence,
    notify_after_check,
    notify_store_error,
)
from watchdog.core.errors import ConfigError, StoreError, UsageError, WatchdogError
from watchdog.core.settings import Settings, load_settings, parse_duration
from watchdog.core.store import open_configured, open_store
from watchdog.daemon.service import add_daemon
from watchdog.daemon.status import add_status
from watchdog.report.text import render_json, render_text
from watchdog.runner.once import checks_for, run_once, system_clock, window_at

PROG = "memory-watchdog"
FORMATS = ("text", "json", "html")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with its zone, e.g. 2026-11-28T04:00:00Z."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--at: {text!r} is not an RFC 3339 time (e.g. 2026-11-28T04:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise UsageError(f"--at: {text!r} has no time zone (add Z or +00:00)")
    return moment.astimezone(UTC)


def _duration_arg(flag: str, text: str) -> timedelta:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if value <= timedelta(0):
        raise UsageError(f"{flag}: must be positive")
    return value


def load(args: argparse.Namespace) -> Settings:
    """Settings from --config / WATCHDOG_CONFIG, with --store applied on top."""
    settings = load_settings(args.config)
    try:
        checks_for(settings)  # custom checks and [checks.<id>] names, validated up front
    except ConfigError as exc:
        origin = args.config or os.environ.get("WATCHDOG_CONFIG")
        raise ConfigError(exc.key, exc.problem, origin=origin) from None
    if getattr(args, "store", None):
        settings = settings.model_copy(
            update={"store": settings.store.model_copy(update={"url": args.store})}
        )
    return settings


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="TOML config file (default: $WATCHDOG_CONFIG, else built-in defaults)"
    )
    parser.add_argument(
        "--store", help="chdb:///path, chdb://memory or http(s)://user:pass@host:8123/db"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")


def _add_check(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("check", help="evaluate once and print the report")
    common_arguments(p)
    p.add_argument("--at", help="evaluation time, RFC 3339 (default: now); replays the past")
    p.add_argument("--window", help="window length, e.g. 4h (default: window.length)")
    p.add_argument("--format", default="text", help="text | json | html")
    p.add_argument("--output", help="write the report to this file instead of stdout")
    p.add_argument("--notify", action="store_true", help="run the alert lifecycle and send")
    p.set_defaults(run=cmd_check)


def evaluate_once(
    settings: Settings, at: datetime, length: timedelta | None, *, triage: bool = False
) -> Report:
    """Open the store, evaluate one window (with its triage breakdown if asked), close it."""
    with open_configured(settings.store) as store:
        report = run_once(store, settings, window_at(settings, at, length))
        if triage:
            from checks.triage import with_triage

            report = with_triage(store, settings, report)
        return report


def _emit(text: str, output: str | None) -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--output: cannot write {output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)


def render(report: Report, fmt: str, *, color: bool) -> str:
    if fmt == "json":
        return render_json(report)
    return render_text(report, color=color)


def exit_code(report: Report) -> int:
    """0 when nothing breached; 1 when a check breached or could not run."""
    return 0 if report.status is Status.OK else 1


def cmd_check(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"--format: {args.format!r} is not accepted (accepted: text, json, html)")
    at = parse_time(args.at) if args.at else system_clock()
    length = _duration_arg("--window", args.window) if args.window else None
    settings = load(args)
    started = time.monotonic()
    page = ""
    try:
        if args.format == "html":  # triage and history are read while the store is open
            from watchdog.report.page import evaluate_page

            report, page = evaluate_page(settings, at, length)
        else:
            report = evaluate_once(settings, at, length, triage=args.format == "json")
    except StoreError as exc:
        if args.notify:  # fire the `store` alert, then exit 3 as usual
            notify_store_error(settings, at, length, exc)
        raise
    duration_s = time.monotonic() - started
    color = not args.output and sys.stdout.isatty()
    _emit(page or render(report, args.format, color=color), args.output)
    if args.notify:  # alert lifecycle and delivery; a chat failure never changes the exit code
        notify_after_check(settings, report, duration_s=duration_s)
    return exit_code(report)


def _add_demo(sub: argparse._SubParsersAction[_Parser]) -> None:
    from watchdog.cli.demo import add_arguments, cmd_demo

    p = sub.add_parser(
        "demo", help="fill an embedded demo store with realistic telemetry and check it"
    )
    common_arguments(p)
    add_arguments(p)
    p.set_defaults(run=cmd_demo)


def _add_test_checks(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser(
        "test-checks", help="run offline rule tests of the checks (exit 1 on a failure)"
    )
    p.add_argument("file", help="rule file (TOML) with [[case]] tables")
    common_arguments(p)
    p.set_defaults(run=cmd_test_checks)


def cmd_test_checks(args: argparse.Namespace) -> int:
    import tempfile

    from watchdog.runner.rule_files import (
        format_outcomes,
        load_rule_file,
        run_rule_file,
        settings_for_rules,
    )

    rules = load_rule_file(args.file)
    settings = settings_for_rules(rules, args.config)
    checks_for(settings)
    with tempfile.TemporaryDirectory(prefix="memory-watchdog-rules-") as scratch:
        url = args.store or f"chdb://{scratch}/store"
        with open_store(url) as store:
            outcomes = run_rule_file(store, rules, settings)
    sys.stdout.write(format_outcomes(args.file, outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


# name -> function adding the subcommand; each sets `run` on its parser.
COMMANDS: dict[str, Callable[[argparse._SubParsersAction[_Parser]], None]] = {
    "check": _add_check,
    "demo": _add_demo,
    "test-checks": _add_test_checks,
    "silence": add_silence,
    "alerts": add_alerts,
    "notify-test": add_notify_test,
    "daemon": add_daemon,
    "status": add_status,
    "schema": add_schema,
}


def build_parser() -> _Parser:
    parser = _Parser(prog=PROG, description="The verify layer of agent memory.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in COMMANDS.values():
        add(sub)
    return parser


OWN_LOGGERS = ("watchdog", "checks", "alerts", "benchmarks")


def _own_records(record: logging.LogRecord) -> bool:
    return record.name.split(".")[0] in OWN_LOGGERS or record.levelno >= logging.CRITICAL


def configure_logging(debug: bool) -> None:
    """Our own warnings on stderr; third-party chatter only with --debug (errors are one line).

    A filter on the handler rather than logger levels: libraries such as
    clickhouse-connect set their loggers' levels when imported.
    """
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_own_records)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    configure_logging(debug)
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "run", None):
            raise UsageError(f"a command is required ({', '.join(COMMANDS)}; see {PROG} --help)")
        code: int = args.run(args)
        return code
    except WatchdogError as exc:
        if debug:  # the traceback too, but the documented exit code all the same
            traceback.print_exc()
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): no traceback, the conventional SIGPIPE code.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def run() -> NoReturn:
    sys.exit(main())
