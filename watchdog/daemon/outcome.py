"""How one window's run ended: the words metrics, telemetry, the log and `daemon --once` use (docs/operations.md)."""

from __future__ import annotations

from enum import StrEnum

from checks.base import Status


class RunOutcome(StrEnum):
    """The outcome of a window's run: its report's status, or why there is no report."""

    OK = "ok"
    BREACHED = "breached"
    ERROR = "error"  # a check could not run
    STORE_ERROR = "store_error"  # the source could not be read at all
    CRASHED = "crashed"  # the tick's process died before it finished

    @classmethod
    def of(cls, status: Status) -> RunOutcome:
        """The outcome of a run whose report has `status` (ok, breached or error)."""
        return cls(status.value)
