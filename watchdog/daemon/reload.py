"""SIGHUP: what a reloaded config changes in a running daemon, and what waits for a restart.

The loader the CLI hands in reads the file and environment again; `merge`
keeps the store, the source, the data directory and `[ingest]` as they run;
`settled` never takes a file caught mid-rewrite (docs/operations.md#reloading-the-config-sighup).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from alerts.base import Notifier
from alerts.notifiers import build_notifiers
from watchdog.core.durations import format_duration
from watchdog.core.errors import ConfigError, WatchdogError
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.settings.load import read_config_bytes

log = logging.getLogger(__name__)

# Loads and validates the config again, as at start; raises a WatchdogError when invalid.
Loader = Callable[[], Settings]
# What a reload keeps as it runs.
RESTART_ONLY = ("store", "source", "data_dir", "ingest")
SETTLE_S = 0.25  # between the two reads of a reloaded config file
# A reload whose read of the config takes longer is given up (a hung NFS or FUSE mount).
RELOAD_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class Reload:
    """A loaded config as the daemon takes it."""

    settings: Settings  # the loaded config, with the running store, source and data dir
    kept: tuple[str, ...]  # restart-only sections the file changed: they stay as they run
    changed: tuple[str, ...]  # the sections that change

    def kept_line(self) -> str:
        """The warning for the sections kept, '' when none."""
        if not self.kept:
            return ""
        names = " and ".join(self.kept)
        return (
            f"SIGHUP: {names} changed in the config; that takes a restart:"
            f" the running {names} {'stay' if len(self.kept) > 1 else 'stays'} until then"
        )

    def taken_line(self) -> str:
        changed = f"changed: {', '.join(self.changed)}" if self.changed else "no change"
        return f"SIGHUP: config reloaded ({changed}); the next run uses it"


def settled(
    loader: Loader, path: str | None, *, settle: Callable[[], None] | None = None
) -> Loader:
    """`loader`, refusing a config file that is empty or changes while it is read (ConfigError).

    `settle` waits between the first two reads (default SETTLE_S seconds).
    """
    if path is None:
        return loader
    pause = settle if settle is not None else (lambda: time.sleep(SETTLE_S))

    def load() -> Settings:
        first = _contents(path)
        if not first.strip():
            raise ConfigError("", "the file is empty (being rewritten?)", origin=path)
        pause()
        if _contents(path) != first:
            raise ConfigError(
                "", "the file changed while it was read (being rewritten?)", origin=path
            )
        loaded = loader()
        if _contents(path) != first:
            raise ConfigError(
                "", "the file changed while it was read (being rewritten?)", origin=path
            )
        return loaded

    return load


def _contents(path: str) -> bytes:
    return read_config_bytes(path)  # bounded: a FIFO or a device is refused, a huge file too


def merge(loaded: Settings, running: Settings) -> Reload:
    """`loaded` with the restart-only sections of `running`, and what it changes."""
    kept = tuple(k for k in RESTART_ONLY if getattr(loaded, k) != getattr(running, k))
    settings = loaded.model_copy(update={k: getattr(running, k) for k in RESTART_ONLY})
    changed = tuple(
        k for k in type(settings).model_fields if getattr(settings, k) != getattr(running, k)
    )
    return Reload(settings, kept, changed)


@dataclass(frozen=True)
class Pending:
    """A reloaded config waiting for the next run, with what it builds."""

    settings: Settings
    schedule: Schedule
    notifiers: Mapping[str, Notifier] | None  # None: the daemon's notifiers were handed in
    reschedule: bool  # the schedule changed: the job fires on the new one from now on


class Reloads:
    """Configs loaded on SIGHUP and held for the next run.

    The file is read in a thread of its own, outside the lock the next run takes its config
    under, and given up after `read_timeout` (a hung mount): judging never waits on a read,
    and one read at a time is enough (a SIGHUP while one hangs says so and reads nothing).
    """

    def __init__(
        self, loader: Loader, *, own_notifiers: bool, read_timeout: timedelta = RELOAD_TIMEOUT
    ) -> None:
        self._loader = loader
        self._own_notifiers = own_notifiers
        self.read_timeout = read_timeout
        self._lock = threading.Lock()  # the pending config only; held for no read
        self._reading = threading.Lock()  # held by the thread reading the config
        self._reading_since = 0.0
        self._pending: Pending | None = None

    def load(self, running: Settings) -> Pending | None:
        """Load, validate and merge the config; what the next run takes, or None when invalid.

        `running` is the daemon's config (a config already waiting counts as running).
        Every outcome is logged in one line: taken, kept sections, or why not.
        """
        if not self._reading.acquire(blocking=False):
            log.error(
                "SIGHUP: config not reloaded: the reload of %.0fs ago is still reading it"
                " (a hung mount?); the running config stays",
                time.monotonic() - self._reading_since,
            )
            return None
        self._reading_since = time.monotonic()
        done = threading.Event()
        read: list[tuple[Settings, Mapping[str, Notifier] | None, Schedule] | BaseException] = []

        def reading() -> None:
            try:
                loaded = self._loader()
                notifiers = build_notifiers(loaded) if self._own_notifiers else None
                read.append((loaded, notifiers, Schedule.from_settings(loaded.schedule)))
            except BaseException as exc:  # handed to the waiting thread, which says it
                read.append(exc)
            finally:
                self._reading.release()
                done.set()

        threading.Thread(target=reading, name="reload-read", daemon=True).start()
        if not done.wait(self.read_timeout.total_seconds()):
            log.error(
                "SIGHUP: config not reloaded, the running one stays: reading it did not finish"
                " within %s (a hung mount?); a SIGHUP after the read comes back reloads it",
                format_duration(self.read_timeout),
            )
            return None
        [outcome] = read
        if isinstance(outcome, WatchdogError):
            log.error("SIGHUP: config not reloaded, the running one stays: %s", outcome)
            return None
        if isinstance(outcome, BaseException):  # a bug of ours: the daemon keeps running
            log.error(
                "SIGHUP: config not reloaded, the running one stays",
                exc_info=(type(outcome), outcome, outcome.__traceback__),
            )
            return None
        loaded, notifiers, schedule = outcome
        with self._lock:
            base = self._pending.settings if self._pending is not None else running
            taken = merge(loaded, base)
            if taken.kept:
                log.warning("%s", taken.kept_line())
            log.info("%s", taken.taken_line())
            self._pending = Pending(
                taken.settings, schedule, notifiers, taken.settings.schedule != base.schedule
            )
            return self._pending

    def take(self) -> Pending | None:
        """The config waiting for the next run, if any (taken: it waits no more)."""
        with self._lock:
            pending, self._pending = self._pending, None
            return pending
