"""Error runs the store could not take: a small local file, flushed at the next good run.

The run log and alert state live in the store (docs/spec.md section 8). When the
store itself cannot be opened (unreachable, or the embedded directory held
by another process), a run that fails cannot be recorded there. The daemon
keeps such runs here instead, under the data directory, one JSON file per
store and source, rewritten atomically. It also remembers which notifiers
were already told that the store is down, so a restart during an outage
never announces it twice. At the next run that opens the store the runs are
written into the run log (`alerts.pipeline.process_store_error`) and the file is
emptied. The file holds the masked store URL only, never a password.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from checks.base import Window
from watchdog.core.files import write_atomic
from watchdog.core.settings import Settings
from watchdog.core.times import from_ms, to_ms
from watchdog.core.urls import mask_url

log = logging.getLogger(__name__)

# An outage of weeks on a 2s schedule must not grow the file without bound.
LIMIT = 1000


@dataclass(frozen=True)
class SpooledRun:
    """A run that could not read the store, waiting to be written into its run log."""

    at: datetime
    window_start: datetime
    problem: str
    recorded_at: datetime
    duration_s: float | None = None

    def window(self, lookback: timedelta) -> Window:
        return Window(at=self.at, length=self.at - self.window_start, lookback=lookback)

    def to_json(self) -> dict[str, Any]:
        return {
            "at_ms": to_ms(self.at),
            "window_start_ms": to_ms(self.window_start),
            "problem": self.problem,
            "recorded_at_ms": to_ms(self.recorded_at),
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpooledRun:
        return cls(
            at=from_ms(int(data["at_ms"])),
            window_start=from_ms(int(data["window_start_ms"])),
            problem=str(data["problem"]),
            recorded_at=from_ms(int(data["recorded_at_ms"])),
            duration_s=data.get("duration_s"),
        )


@dataclass
class SpoolState:
    """What the spool file holds."""

    store: str = ""  # the masked store URL, for people reading the file
    runs: list[SpooledRun] = field(default_factory=list)
    dropped: int = 0  # runs beyond LIMIT, oldest first, counted not kept
    told: list[str] = field(default_factory=list)  # notifiers told directly that the store is down


def spool_path(settings: Settings) -> Path:
    """`<data dir>/spool/<key>.json`, the key a hash of store URL, database and source."""
    source = settings.source
    key = "\x00".join(
        (
            settings.store.url,
            settings.store.database,
            source.name,
            source.table or "",
            source.preset,
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return settings.data_dir / "spool" / f"{digest}.json"


class Spool:
    """The spool file and its contents, loaded once and written through on every change."""

    def __init__(self, path: Path, *, store: str = "", limit: int = LIMIT) -> None:
        self.path = path
        self.limit = limit
        self.state = self._load(store)

    @classmethod
    def for_settings(cls, settings: Settings) -> Spool:
        return cls(spool_path(settings), store=mask_url(settings.store.url))

    def _load(self, store: str) -> SpoolState:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return SpoolState(
                store=str(data.get("store", store)),
                runs=[SpooledRun.from_json(r) for r in data.get("runs", [])],
                dropped=int(data.get("dropped", 0)),
                told=[str(n) for n in data.get("told", [])],
            )
        except FileNotFoundError:
            return SpoolState(store=store)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # A damaged file is set aside, never silently dropped.
            aside = self.path.with_suffix(".damaged")
            with contextlib.suppress(OSError):
                self.path.replace(aside)
            log.warning("spool %s is unreadable (%s); moved to %s", self.path, exc, aside)
            return SpoolState(store=store)

    @property
    def runs(self) -> list[SpooledRun]:
        return list(self.state.runs)

    @property
    def since(self) -> datetime | None:
        """The end of the oldest window waiting here."""
        return min((r.at for r in self.state.runs), default=None)

    @property
    def told(self) -> frozenset[str]:
        return frozenset(self.state.told)

    def __bool__(self) -> bool:
        return bool(self.state.runs or self.state.told or self.state.dropped)

    def add(self, run: SpooledRun) -> None:
        """Keep one failed run (the same evaluation time replaces the earlier one)."""
        runs = [r for r in self.state.runs if r.at != run.at] + [run]
        overflow = max(0, len(runs) - self.limit)
        self.state.runs = runs[overflow:]
        self.state.dropped += overflow
        self._write()

    def mark_told(self, notifiers: list[str]) -> None:
        """Remember that these notifiers were told directly that the store is down."""
        self.state.told = sorted(set(self.state.told) | set(notifiers))
        self._write()

    def clear(self) -> None:
        """Everything was written into the store: forget it."""
        self.state = SpoolState(store=self.state.store)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _write(self) -> None:
        document = {
            "store": self.state.store,
            "runs": [r.to_json() for r in self.state.runs],
            "dropped": self.state.dropped,
            "told": self.state.told,
        }
        try:
            write_atomic(self.path, json.dumps(document, indent=1))
        except OSError as exc:
            # The runs stay in memory; they reach the store when it is back.
            log.warning("cannot write spool %s: %s", self.path, exc.strerror)
