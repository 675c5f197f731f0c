"""What every subcommand shares: the parser, --config/--store/--debug, and flag parsing.

Flags are checked here, once: a duration flag (`--window 4h`, `--for 2h`,
`--max-age 4h30m`, ...) by `duration_flag`, a time flag (`--at`, `--until`) by
`time_flag`; a bad one is a `UsageError` naming the flag (exit 2; docs/spec.md#7-command-line).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import checks.kinds  # noqa: F401  (registers the check kinds [[checks.custom]] can declare)
from watchdog.core.durations import parse_duration
from watchdog.core.errors import ConfigError, StoreError, UsageError
from watchdog.core.logs import LOG_FORMATS, said
from watchdog.core.logs import PROG as PROG  # the name every command prints
from watchdog.core.settings import Settings, command_flags, load_settings
from watchdog.core.settings.load import check_store_tls, check_store_url
from watchdog.core.store import Store, open_configured
from watchdog.core.times import parse_time
from watchdog.runner.plugins import PLUGINS

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[Any]
else:  # not subscriptable at run time before Python 3.12
    Subparsers = argparse._SubParsersAction


# Where a namespace notes the innermost (sub)command parser that was left with unknown arguments.
_LEFT_OVER_BY = "_left_over_by"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2, hinting the `--help`
    of the (sub)command the error is in: `check --bogus` hints `memory-watchdog check --help`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # A subcommand's parser runs first and hands its leftovers up to the top parser, which
        # would report them as its own: the innermost one that had leftovers is noted here.
        parsed, left = super().parse_known_args(args, namespace)
        if left:
            vars(parsed).setdefault(_LEFT_OVER_BY, self)
        return parsed, left

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, left = self.parse_known_args(args, namespace)
        if left:
            owner: argparse.ArgumentParser = getattr(parsed, _LEFT_OVER_BY, self)
            owner.error(f"unrecognized arguments: {' '.join(left)}")
        return parsed


def package_version() -> str:
    """The installed memory-watchdog's version."""
    try:
        return metadata.version("memory-watchdog")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def shared_package_warning() -> str | None:
    """One line when another installed distribution owns files in the `watchdog` package too.

    Our import package is named `watchdog`, as the file-events library on PyPI is: installed
    in one environment they share a directory, and installing or uninstalling either one
    changes the other. What each distribution installed is in its RECORD (`dist.files`).
    """
    for dist in metadata.distributions():
        name = dist.name or "?"
        if re.sub(r"[-_.]+", "-", name).lower() == "memory-watchdog":
            continue
        if any(file.parts[:1] == ("watchdog",) for file in dist.files or ()):
            return (
                f"warning: {name} {dist.version} is installed here too and owns files in the"
                " same `watchdog` package directory: installing or uninstalling either one"
                " changes the other; install memory-watchdog in an environment of its own"
                " (pipx install, uv tool install)"
            )
    return None


class VersionAction(argparse.Action):
    """`--version`: the version on stdout, and the shared-package warning on stderr if any."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, help="show program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{PROG} {package_version()}")
        warning = shared_package_warning()
        if warning:
            said(warning, level=logging.WARNING)
        parser.exit()


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="TOML config file (default: $WATCHDOG_CONFIG, else built-in defaults)"
    )
    parser.add_argument(
        "--store", help="chdb:///path, chdb://memory or http(s)://user:pass@host:8123/db"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="log lines on stderr as text (default), json (one object a line) or logfmt",
    )


def load(args: argparse.Namespace) -> Settings:
    """Settings from --config / WATCHDOG_CONFIG (validated whole), with --store applied on top."""
    settings = load_settings(args.config, plugins=PLUGINS)
    store = getattr(args, "store", None)
    if store:
        check_store_url(store, "--store")
        settings = settings.with_store_url(store)
        check_store_tls(settings, "--store")
    return settings


def judged(settings: Settings, store: Store | None = None) -> Settings:
    """The settings with the source the daemon and every command judge when the config names
    none (`Settings.with_default_source`: the receiver's table when the store holds it).

    Asked of `store` when the command has it open already (its errors are the command's);
    else of the store opened for it, and a store that cannot be opened leaves them as they
    are: the command's own use of it says what is wrong, in its words.
    """
    if settings.source_named:
        return settings
    if store is not None:
        return settings.with_default_source(store.has_table)
    try:
        with open_configured(settings.store) as store:
            return settings.with_default_source(store.has_table)
    except StoreError:
        return settings


def printed(settings: Settings, command: str) -> str:
    """A `memory-watchdog <command>` printed for the user, with the flags that make it read what
    this command read (`command_flags`: --config, a --store not the default), shell-quoted."""
    flags = command_flags(settings)
    return f"{PROG} {command} {flags}" if flags else f"{PROG} {command}"


def require_secrets(settings: Settings) -> None:
    """For commands that send: a notifier secret referenced but not set is exit 2, naming it."""
    missing = settings.alerts.missing_secrets()
    if missing:
        raise ConfigError(missing[0].key, f"environment variable {missing[0].variable} is not set")


def duration_flag(flag: str, text: str) -> timedelta:
    """A positive duration flag, e.g. `--window 4h`."""
    if text.strip().startswith("-"):
        raise UsageError(f"{flag}: must be positive")
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if value <= timedelta(0):
        raise UsageError(f"{flag}: must be positive")
    return value


def emit(text: str, output: str | None) -> None:
    """A command's output, to `--output FILE` when given, else to stdout."""
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--output: cannot write {output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)


def time_flag(flag: str, text: str) -> datetime:
    """An RFC 3339 time with its zone, e.g. 2026-11-28T04:00:00Z."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
