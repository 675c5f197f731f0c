"""A benchmark times runs that judged: a measured report with a check in `error` stops it.

A check in `error` did not do its work (its query failed), so a run with one is fast for the
wrong reason and its ratio to the floor means nothing. Every benchmark that prints a ratio
hands each report it measured to `refuse_errors`, and its entry point runs through
`exit_code`: one line on stderr naming the checks, and a non-zero exit, instead of a ratio.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

EXIT = 3  # a measured run had checks in `error`: no ratio is reported
SUMMARY_CHARS = 160  # of each distinct error summary, in the message


class ErroredChecks(Exception):
    """A report a benchmark measured had checks in `error` (`checks`: id -> summary)."""

    def __init__(self, where: str, checks: Mapping[str, str]) -> None:
        self.where = where
        self.checks = dict(checks)
        reasons = sorted({summary[:SUMMARY_CHARS] for summary in self.checks.values()})
        super().__init__(
            f"{where}: {len(self.checks)} check(s) in error, so its timing measures nothing:"
            f" {', '.join(sorted(self.checks))} ({'; '.join(reasons)})"
        )


def refuse_errors(where: str, checks: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise ErroredChecks naming every check of `checks` (a JSON report's `checks`) whose
    status is `error`; `where` says which run of which case made the report."""
    errored = {
        check: str(result.get("summary", ""))
        for check, result in checks.items()
        if result.get("status") == "error"
    }
    if errored:
        raise ErroredChecks(where, errored)


def exit_code(main: Callable[[], int]) -> int:
    """A benchmark's entry point: `main`'s exit code, or EXIT with one line on stderr naming
    the checks when a measured report had checks in `error`."""
    try:
        return main()
    except ErroredChecks as exc:
        print(f"benchmark refused: {exc}", file=sys.stderr)
        return EXIT
