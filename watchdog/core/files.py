"""Durable file writes: a file is either its old content or its new one, even across a crash.

One way for every writer (the daemon's spool, the OTLP ingest spool, the report pages): the
content goes to a temporary file in the same filesystem, which is fsynced, renamed over the
target, and the directory is fsynced so the rename itself survives a power loss
(docs/architecture.md#where-each-concern-lives).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temporary(tmp: Path, data: bytes) -> None:
    """`data` in `tmp`, fsynced; on failure no file is left behind (a full disk leaves none)."""
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic(path: Path, data: bytes | str, *, tmp_dir: Path | None = None) -> None:
    """`data` at `path`, complete or not at all, surviving a crash once this returns.

    The temporary file is written in `tmp_dir` (which must be on the same filesystem as
    `path`), else beside `path` as a hidden `.tmp-*` file. Text is written as UTF-8.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = (tmp_dir or path.parent) / f".tmp-{uuid.uuid4().hex}.tmp"
    write_temporary(tmp, raw)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
