"""The command line (docs/spec.md, section 7): `memory-watchdog check|daemon|status|...`.

Every `WatchdogError` becomes one line on stderr and the documented exit
code: 0 no breach, 1 a breach (or a check that could not run), 2 usage or
config, 3 the store could not be read. A bug of ours is exit 1 with one line
saying so; the traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from watchdog.cli.alerts import add_alerts, add_notify_test
from watchdog.cli.args import PROG, Parser, Subparsers, package_version
from watchdog.cli.check import add_check
from watchdog.cli.config import add_config
from watchdog.cli.daemon import add_daemon
from watchdog.cli.demo import add_demo
from watchdog.cli.rules import add_test_checks
from watchdog.cli.schema import add_schema
from watchdog.cli.silence import add_silence_commands
from watchdog.cli.status import add_status
from watchdog.core.errors import UsageError, WatchdogError
from watchdog.core.logs import configure_logging

# name -> function adding the subcommand; each sets `run` on its parser.
COMMANDS: dict[str, Callable[[Subparsers], None]] = {
    "check": add_check,
    "demo": add_demo,
    "test-checks": add_test_checks,
    "silence": add_silence_commands,
    "alerts": add_alerts,
    "notify-test": add_notify_test,
    "daemon": add_daemon,
    "status": add_status,
    "schema": add_schema,
    "config": add_config,
}


def build_parser(commands: Mapping[str, Callable[[Subparsers], None]] = COMMANDS) -> Parser:
    parser = Parser(prog=PROG, description="The verify layer of agent memory.")
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for add in commands.values():
        add(sub)
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """Every option string in every subcommand, and those of them that take one value."""
    every: set[str] = set()
    valued: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child_every, child_valued = _option_strings(child)
                every |= child_every
                valued |= child_valued
            continue
        every.update(action.option_strings)
        if action.option_strings and action.nargs is None and action.const is None:
            valued.update(s for s in action.option_strings if s.startswith("--"))
    return every, valued


def attach_dash_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """`--window -4h` as `--window=-4h`: a value that starts with a dash is still the value.

    argparse would take `-4h` for an option and say "expected one argument";
    joined, the flag's own parser says what is wrong with the value.
    """
    every, flags = _option_strings(parser)
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        token = items[i]
        following = items[i + 1] if i + 1 < len(items) else None
        if (
            token in flags
            and following is not None
            and following.startswith("-")
            and following not in every
            and not following.startswith("--")
        ):
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def main(
    argv: Sequence[str] | None = None,
    commands: Mapping[str, Callable[[Subparsers], None]] = COMMANDS,
) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    configure_logging(debug)
    try:
        parser = build_parser(commands)
        args = parser.parse_args(attach_dash_values(parser, argv))
        if not getattr(args, "run", None):
            raise UsageError(f"a command is required ({', '.join(commands)}; see {PROG} --help)")
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
    except Exception as exc:  # a bug of ours: never passed off as an outage or a bad config
        if debug:
            traceback.print_exc()
        how = "" if debug else "; run again with --debug for the traceback"
        print(
            f"{PROG}: internal error ({type(exc).__name__}), a bug in memory-watchdog{how}",
            file=sys.stderr,
        )
        return 1


def run() -> NoReturn:
    sys.exit(main())
