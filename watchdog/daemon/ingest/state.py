"""The spool's state, as `/healthz`, `/status`, `/metrics` and `memory-watchdog status` say it.

What waits to be loaded, what was set aside, the room left on the spool's
filesystem, and whether the receiver can keep what it is sent: the running
receiver knows why its last write failed; `status`, which runs apart from
the daemon, reads the directory and its filesystem
(docs/operations.md#is-the-watchdog-alive-status-and---max-age).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.core.settings import Settings
from watchdog.core.text import printable

# The spool's layout (watchdog.daemon.ingest.spool), here so that reading the state needs no
# OTLP decoder: `status` runs without one.
BATCH_SUFFIX = ".jsonl"
RESERVE_BYTES = 1024 * 1024  # kept free for the load records and ledger lines of draining


def spool_dir(settings: Settings) -> Path:
    """`[ingest] spool_dir`, else `<data_dir>/ingest`."""
    configured = settings.ingest.spool_dir
    return Path(configured) if configured else settings.data_dir / "ingest"


@dataclass(frozen=True)
class SpoolState:
    """The receiver's spool at one moment."""

    directory: str
    queued_batches: int  # requests accepted and not yet loaded (every destination's)
    queued_bytes: int
    quarantined: int  # requests set aside (the store refused them)
    free_bytes: int | None  # on the spool's filesystem; None when it cannot be read
    problem: str  # why the receiver cannot keep what it is sent; "" when it can

    @property
    def ok(self) -> bool:
        return not self.problem

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "status": "ok" if self.ok else "unwritable",
            "problem": self.problem or None,
            "queued_requests": self.queued_batches,
            "queued_bytes": self.queued_bytes,
            "quarantined_requests": self.quarantined,
            "free_bytes": self.free_bytes,
        }

    def line(self) -> str:
        """One line for `status`'s text."""
        queued = f"{self.queued_batches} request(s), {self.queued_bytes} bytes waiting to load"
        aside = f"; {self.quarantined} set aside in quarantine/" if self.quarantined else ""
        state = "ok" if self.ok else f"CANNOT ACCEPT: {self.problem}"
        return f"Receiver spool {printable(self.directory)}: {state}; {queued}{aside}"


def read_spool_state(directory: Path, problem: str | None = None) -> SpoolState:
    """The spool at `directory`; `problem` from the running receiver, else judged from the disk."""
    batches = _files(directory / "batches", BATCH_SUFFIX)
    free: int | None
    block = 1
    try:
        stats = os.statvfs(directory)
        free, block = stats.f_bavail * stats.f_frsize, stats.f_frsize
    except OSError:
        free = None
    if problem is None:
        problem = _judged(directory, free, block)
    return SpoolState(
        directory=str(directory),
        queued_batches=len(batches),
        queued_bytes=sum(size for size in batches.values()),
        quarantined=len(_files(directory / "quarantine", BATCH_SUFFIX)),
        free_bytes=free,
        problem=problem,
    )


def _judged(directory: Path, free: int | None, block: int) -> str:
    """Why a receiver could not keep what it is sent, from the directory alone ("" when it could).

    A receiver keeps RESERVE_BYTES set aside for draining before it accepts anything, and never
    writes a request into them: without the reserve it needs that much room, with it a block.
    """
    if not directory.exists():
        return ""  # made at the receiver's start
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable"
    try:
        reserved = (directory / "reserve").stat().st_size >= RESERVE_BYTES
    except OSError:
        reserved = False
    if free is not None and free < (block if reserved else RESERVE_BYTES):
        return f"the filesystem of {directory} is full"
    return ""


def _files(directory: Path, suffix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        for entry in os.scandir(directory):
            if entry.name.endswith(suffix):
                try:
                    found[entry.name] = entry.stat().st_size
                except OSError:
                    continue
    except OSError:
        return {}
    return found
