"""The receiver's spool: what was acknowledged, on disk until it is in the store, exactly once.

Batches are fsynced before the client is answered, loads carry their
deduplication token, the ledger of loaded digests recognises a retry for its
store and table, and a reserve keeps a full disk drainable; the files and
why they are there: docs/start-without-clickhouse.md#what-is-stored-where and
docs/architecture.md#one-store-one-process-at-a-time-the-receiver.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from watchdog.core.files import fsync_dir, write_atomic, write_temporary
from watchdog.daemon.ingest.otlp import SIGNALS, Batch
from watchdog.daemon.ingest.state import BATCH_SUFFIX, RESERVE_BYTES

log = logging.getLogger(__name__)

_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
_UNUSABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
ANY = "*"  # the destination of names written before destinations were (they match every one)


@dataclass(frozen=True)
class Destination:
    """Where a signal's rows go: the store, as its URL shows with the password masked, and a table."""

    store: str
    table: str

    @property
    def key(self) -> str:
        """A short name of the destination, in batch names and the ledger."""
        return hashlib.sha256(f"{self.store}\n{self.table}".encode()).hexdigest()[:12]


def parse_name(name: str) -> tuple[str, str, str]:
    """(signal, destination key, digest) of a batch file name; ANY for names without one."""
    parts = name.removesuffix(BATCH_SUFFIX).split("-")
    if len(parts) == 2:
        return parts[0], ANY, parts[1]
    return parts[0], parts[1], parts[-1]


# One insert carries at most this much: the loader's memory and one insert's time stay bounded.
MAX_LOAD_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class Load:
    """One insert: batches of one signal into one table, with its deduplication token."""

    token: str
    signal: str
    table: str
    files: tuple[str, ...]  # paths of the batch files, in insert order
    rows: int
    size: int

    @property
    def entries(self) -> tuple[str, ...]:
        """`<destination> <digest>` of each batch, as the ledger keeps them."""
        return tuple(_entry(Path(f).name) for f in self.files)

    def to_json(self) -> str:
        return json.dumps(
            {
                "token": self.token,
                "signal": self.signal,
                "table": self.table,
                "files": list(self.files),
                "rows": self.rows,
                "size": self.size,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Load:
        data = json.loads(text)
        return cls(
            token=str(data["token"]),
            signal=str(data["signal"]),
            table=str(data["table"]),
            files=tuple(str(f) for f in data["files"]),
            rows=int(data["rows"]),
            size=int(data["size"]),
        )


class SpoolUnusable(Exception):
    """The spool directory cannot be used at all (read-only, not ours): one line names it."""


class IngestSpool:
    """The spool directory: accepted batches, planned loads, and the digests loaded lately."""

    def __init__(
        self,
        directory: Path,
        destinations: Mapping[str, Destination],
        *,
        retry_window: timedelta = timedelta(minutes=15),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.destinations = dict(destinations)  # signal -> where its rows go
        self._keys = {d.key for d in destinations.values()} | {ANY}
        self.batches = directory / "batches"
        self.loads = directory / "loads"
        self.tmp = directory / "tmp"
        self.quarantine = directory / "quarantine"
        self.ledger = directory / "loaded.log"
        self.retry_window = retry_window.total_seconds()
        self.reserve = directory / "reserve"
        self._clock = clock
        self._lock = threading.Lock()
        self.problem = ""  # why the last write failed, "" once writes succeed again
        self._reserve_tried = 0.0
        try:
            for sub in (self.batches, self.loads, self.tmp):
                sub.mkdir(parents=True, exist_ok=True)
            for stale in self.tmp.iterdir():  # writes a crash interrupted: never acknowledged
                with contextlib.suppress(OSError):
                    stale.unlink()
        except OSError as exc:
            raise SpoolUnusable(f"{directory}: {exc.strerror}") from None
        self._reserved = self._keep_reserve()
        self._loaded = self._read_ledger()
        self._appended = 0
        # Batch name -> (bytes, rows), in the order they were accepted; another destination's
        # batches (a daemon on another store shares the directory) are left for it.
        self._batches = {p.name: (p.stat().st_size, _count_rows(p)) for p in self._batch_files()}
        self._planned: set[str] = set()
        self._solo: set[str] = set()  # batches of a refused load: each loaded on its own
        for load in self.planned_loads():
            self._planned.update(Path(f).name for f in load.files)

    # -- the receiver's side ------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        """Rows accepted and not yet in the store, in bytes."""
        with self._lock:
            return sum(size for size, _ in self._batches.values())

    def put(self, batch: Batch) -> bool:
        """Keep `batch` durably; False when the same records are kept or were loaded lately.

        When this returns, a crash cannot lose the batch: answer the client then.
        """
        key = self.destinations[batch.signal].key
        name = f"{batch.signal}-{key}-{batch.digest}{BATCH_SUFFIX}"
        path = self.batches / name
        if self._known(name, key, batch.digest):
            return False
        if not self._reserved and not self._retry_reserve():
            raise OSError(errno.ENOSPC, "no room kept for loading (the filesystem is full)")
        tmp = self.tmp / f"{uuid.uuid4().hex}.tmp"
        try:
            write_temporary(tmp, batch.data)
        except OSError as exc:
            self.problem = f"cannot write {self.directory}: {exc.strerror}"
            raise
        self.problem = ""
        with self._lock:
            # Checked again under the lock the loader takes to mark a load done: a batch
            # is either still here, or its digest is in the ledger already.
            if self._known_locked(name, key, batch.digest):
                tmp.unlink()
                return False
            os.replace(tmp, path)
            self._batches[name] = (len(batch.data), batch.rows)
        fsync_dir(self.batches)
        return True

    def _known(self, name: str, key: str, digest: str) -> bool:
        with self._lock:
            return self._known_locked(name, key, digest)

    def _known_locked(self, name: str, key: str, digest: str) -> bool:
        """Kept and waiting, or loaded lately into this destination (the caller holds the lock)."""
        loaded = self._loaded
        return (
            name in self._batches
            or f"{key} {digest}" in loaded
            or f"{ANY} {digest}" in loaded
            or f"{parse_name(name)[0]}-{digest}{BATCH_SUFFIX}" in self._batches
        )

    # -- the loader's side --------------------------------------------------------------

    def _batch_files(self) -> list[Path]:
        return sorted(
            (
                p
                for p in self.batches.iterdir()
                if p.name.endswith(BATCH_SUFFIX) and parse_name(p.name)[1] in self._keys
            ),
            key=lambda p: p.stat().st_mtime_ns,
        )

    def planned_loads(self) -> list[Load]:
        """Loads planned and not done (after a crash: the ones to redo first), oldest first."""
        found = []
        for path in self.loads.glob("*.json"):
            try:
                load = Load.from_json(path.read_text("utf-8"))
                found.append((path.stat().st_mtime_ns, load))
            except (OSError, ValueError, KeyError) as exc:
                log.error("ingest spool: unreadable load %s (%s); left in place", path, exc)
        ours = [
            (at, load)
            for at, load in found
            if all(parse_name(Path(f).name)[1] in self._keys for f in load.files)
        ]
        return [load for _, load in sorted(ours, key=lambda item: item[0])]

    def rescan(self) -> int:
        """Take in batch files that appeared in `batches/` meanwhile (moved back from
        `quarantine/` by hand, as its line says); how many."""
        with self._lock:  # `put` adds its file and its entry under this lock: no half-seen put
            try:
                names = os.listdir(self.batches)
            except OSError:
                return 0
            found = 0
            for name in names:
                if name in self._batches or not name.endswith(BATCH_SUFFIX):
                    continue
                if parse_name(name)[1] not in self._keys:
                    continue  # another destination's
                path = self.batches / name
                try:
                    self._batches[name] = (path.stat().st_size, _count_rows(path))
                except OSError:
                    continue
                found += 1
        if found:
            log.info("ingest spool: %d batch(es) found in %s; loading them", found, self.batches)
        return found

    def plan(self) -> list[Load]:
        """New loads for the batches no load carries yet, each written down before its insert."""
        self.rescan()
        with self._lock:
            pending = {n: entry for n, entry in self._batches.items() if n not in self._planned}
            solo = self._solo & pending.keys()
        planned: list[Load] = []
        for signal in SIGNALS:
            names = [n for n in pending if n.startswith(f"{signal}-")]
            groups = [[n] for n in names if n in solo]
            groups += _groups([n for n in names if n not in solo], pending)
            for group in groups:
                table = self.destinations[signal].table
                planned.append(self._write_load(signal, table, group, pending))
        return planned

    def _write_load(
        self, signal: str, table: str, names: list[str], entries: dict[str, tuple[int, int]]
    ) -> Load:
        token = hashlib.sha256("\n".join([signal, table, *names]).encode()).hexdigest()[:40]
        load = Load(
            token=token,
            signal=signal,
            table=table,
            files=tuple(str(self.batches / n) for n in names),
            rows=sum(entries[n][1] for n in names),
            size=sum(entries[n][0] for n in names),
        )
        self._with_room(
            lambda: write_atomic(
                self.loads / f"{token}.json", load.to_json().encode(), tmp_dir=self.tmp
            )
        )
        with self._lock:
            self._planned.update(names)
        return load

    def done(self, load: Load) -> None:
        """The load is in the store: remember its digests, then drop its batches and itself."""
        now = self._clock()
        entries = load.entries
        self._with_room(lambda: self._append(f"{now:.3f} {e}\n" for e in entries))
        self._appended += len(entries)
        with self._lock:
            for entry in entries:
                self._loaded[entry] = now
            self._drop(load)
        if self._appended > 10_000:
            self._compact_ledger()
        if not self._reserved:  # room was freed: keep it for the next time the disk fills
            self._reserved = self._keep_reserve()

    def split(self, load: Load) -> None:
        """Forget a load the store refused (it wrote nothing); plan each of its batches alone.

        So a batch the store cannot take is set aside alone, and the others are loaded.
        """
        with self._lock:
            for file in load.files:
                name = Path(file).name
                self._planned.discard(name)
                self._solo.add(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.loads / f"{load.token}.json")

    def set_aside(self, load: Load, problem: str) -> None:
        """Move a load's batches to `quarantine/` (the store refuses their rows); never deleted."""
        self.quarantine.mkdir(exist_ok=True)
        for file in load.files:
            with contextlib.suppress(FileNotFoundError):
                os.replace(file, self.quarantine / Path(file).name)
        log.error(
            "ingest: %d %s rows the store refuses were moved to %s (%s);"
            " move them back to %s to load them again (the next round takes them)",
            load.rows,
            load.signal,
            self.quarantine,
            problem,
            self.batches,
        )
        with self._lock:
            self._drop(load)

    def _drop(self, load: Load) -> None:
        """Delete the load's batches and its record (the caller holds the lock)."""
        for file in load.files:
            name = Path(file).name
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
            self._batches.pop(name, None)
            self._planned.discard(name)
            self._solo.discard(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.loads / f"{load.token}.json")

    # -- room to drain ------------------------------------------------------------------

    def _append(self, lines: Iterator[str]) -> None:
        with open(self.ledger, "a", encoding="ascii") as ledger:
            ledger.writelines(lines)
            ledger.flush()
            os.fsync(ledger.fileno())

    def _with_room(self, write: Callable[[], None]) -> None:
        """`write`, given the reserve's room when the filesystem is full (the drain must go on)."""
        try:
            write()
        except OSError as exc:
            if exc.errno not in _NO_ROOM or not self._release_reserve():
                self.problem = f"cannot write {self.directory}: {exc.strerror}"
                raise
            write()

    def _keep_reserve(self) -> bool:
        """Whether RESERVE_BYTES are set aside (written now if they were not); never raises."""
        try:
            if self.reserve.stat().st_size >= RESERVE_BYTES:
                return True
        except OSError:
            pass
        try:
            write_temporary(self.reserve, bytes(RESERVE_BYTES))
        except OSError as exc:
            if exc.errno in _UNUSABLE:
                raise SpoolUnusable(f"{self.directory}: {exc.strerror}") from None
            self.problem = f"the filesystem of {self.directory} is full: accepting nothing new"
            log.warning("ingest spool: %s (%s)", self.problem, exc.strerror)
            return False
        if self.problem:
            log.info("ingest spool: %s has room again", self.directory)
        self.problem = ""
        return True

    def _retry_reserve(self) -> bool:
        """Set the reserve aside again, tried at most once a second (the receiver asks)."""
        now = time.monotonic()
        if now - self._reserve_tried < 1.0:
            return False
        self._reserve_tried = now
        try:
            self._reserved = self._keep_reserve()
        except SpoolUnusable:
            return False
        return self._reserved

    def _release_reserve(self) -> bool:
        """Give the reserve's room to a write of the drain; False when there was none."""
        try:
            self.reserve.unlink()
        except FileNotFoundError:
            return False
        self._reserved = False
        log.warning("ingest spool: %s is full; draining with the room kept for it", self.directory)
        return True

    # -- the ledger ---------------------------------------------------------------------

    def _read_ledger(self) -> dict[str, float]:
        loaded: dict[str, float] = {}
        oldest = self._clock() - self.retry_window
        with contextlib.suppress(FileNotFoundError):
            for line in self.ledger.read_text("ascii", errors="replace").splitlines():
                at, _, entry = line.partition(" ")
                if entry and " " not in entry:  # written before destinations: any destination
                    entry = f"{ANY} {entry}"
                with contextlib.suppress(ValueError):
                    if float(at) >= oldest and entry.strip():
                        loaded[entry] = float(at)
        return loaded

    def _compact_ledger(self) -> None:
        """Forget the digests older than the retry window, on disk and in memory."""
        oldest = self._clock() - self.retry_window
        with self._lock:
            self._loaded = {d: at for d, at in self._loaded.items() if at >= oldest}
            text = "".join(f"{at:.3f} {d}\n" for d, at in self._loaded.items())
            self._with_room(
                lambda: write_atomic(self.ledger, text.encode("ascii"), tmp_dir=self.tmp)
            )
            self._appended = 0

    def prune(self) -> None:
        """Forget the digests older than the retry window (the loader calls it now and then)."""
        if self._loaded and min(self._loaded.values()) < self._clock() - self.retry_window:
            self._compact_ledger()

    def pending(self) -> Iterator[str]:
        """Names of the batches not yet loaded (tests, status)."""
        with self._lock:
            names = list(self._batches)
        yield from names


def _groups(names: list[str], entries: dict[str, tuple[int, int]]) -> Iterator[list[str]]:
    """`names` in order, cut so that no group but a single big batch exceeds MAX_LOAD_BYTES."""
    group: list[str] = []
    total = 0
    for name in names:
        size = entries[name][0]
        if group and total + size > MAX_LOAD_BYTES:
            yield group
            group, total = [], 0
        group.append(name)
        total += size
    if group:
        yield group


def _entry(name: str) -> str:
    """`<destination> <digest>` of a batch file name, as the ledger keeps it."""
    _, key, digest = parse_name(name)
    return f"{key} {digest}"


def _count_rows(path: Path) -> int:
    """Rows in a batch file: one per line."""
    count = 0
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as data:
        for chunk in iter(lambda: data.read(1024 * 1024), b""):
            count += chunk.count(b"\n")
    return count
