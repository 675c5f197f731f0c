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

from alerts.base import Notifier
from alerts.notifiers import build_notifiers
from watchdog.core.errors import ConfigError, WatchdogError
from watchdog.core.settings import Settings
from watchdog.core.settings.load import read_config_bytes
from watchdog.daemon.schedule import Schedule

log = logging.getLogger(__name__)

# Loads and validates the config again, as at start; raises a WatchdogError when invalid.
Loader = Callable[[], Settings]
# What a reload keeps as it runs.
RESTART_ONLY = ("store", "source", "data_dir", "ingest")
SETTLE_S = 0.25  # between the two reads of a reloaded config file


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
    """Configs loaded on SIGHUP and held for the next run; one load at a time."""

    def __init__(self, loader: Loader, *, own_notifiers: bool) -> None:
        self._loader = loader
        self._own_notifiers = own_notifiers
        self._lock = threading.Lock()
        self._pending: Pending | None = None

    def load(self, running: Settings) -> Pending | None:
        """Load, validate and merge the config; what the next run takes, or None when invalid.

        `running` is the daemon's config (a config already waiting counts as running).
        Every outcome is logged in one line: taken, kept sections, or why not.
        """
        with self._lock:
            try:
                loaded = self._loader()
                notifiers = build_notifiers(loaded) if self._own_notifiers else None
                schedule = Schedule.from_settings(loaded.schedule)
            except WatchdogError as exc:
                log.error("SIGHUP: config not reloaded, the running one stays: %s", exc)
                return None
            except Exception:  # a bug of ours: the daemon keeps running as it was
                log.exception("SIGHUP: config not reloaded, the running one stays")
                return None
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
