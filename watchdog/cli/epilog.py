"""The end of every command's `--help`: examples, then the exit codes (docs/spec.md#7-command-line).

Each command hands `helped(examples, exits)` to `add_parser`; the exit codes are worded here
once, so `check`, `backtest` and the rest say 2 and 3 alike. tests/test_help.py runs every
example through the real parser.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

from watchdog.core.logs import PROG

WIDTH = 79  # the exit codes' lines, wrapped (the help above wraps to the terminal)
# (command line after the program's name, what it does)
Example = tuple[str, str]

USAGE = (2, "usage or config error: one line naming the flag or key and what is accepted")
STORE = (
    3,
    "the store could not be read: unreachable, TLS, authentication, missing table or column,"
    " a locked embedded store (one line, the password masked)",
)
DONE = (0, "done")
# The codes of a check: `check`, `daemon --once`, and the program as a whole.
CHECK_EXITS = (
    (0, "no check breached"),
    (1, "a check breached, or could not be evaluated (error)"),
    USAGE,
    STORE,
)
# Commands that read or change the store and have no failure of their own.
PLAIN_EXITS = (DONE, USAGE, STORE)


def epilog(examples: Sequence[Example], exits: Sequence[tuple[int, str]]) -> str:
    """`Examples:` (a comment line, then the command) and `Exit codes:`, as help prints them."""
    lines = ["Examples:"]
    for command, what in examples:
        lines += [f"  # {what}", f"  {PROG} {command}"]
    lines += ["", "Exit codes:"]
    for code, meaning in exits:
        lines.append(
            textwrap.fill(meaning, WIDTH, initial_indent=f"  {code}  ", subsequent_indent="     ")
        )
    return "\n".join(lines)


def helped(examples: Sequence[Example], exits: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """`add_parser` keywords for a help that ends with the examples and the exit codes, kept as
    written (the options above are wrapped as usual)."""
    return {
        "epilog": epilog(examples, exits),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
