"""The receiver in the daemon: accept OTLP, spool it, load it in turns with the daemon's runs.

`Ingest` owns the receiver, its HTTP and gRPC servers, the spool and the
loader thread, which takes the store's turn (a lock the daemon's ticks take
too on the embedded store, `TurnTakingTicks`) every `load_every` and loads in a child process;
admission answers 429/503 once `max_queued` waits
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from watchdog.core.errors import ConfigError
from watchdog.core.logs import DEFAULT_LOGS, LogSetup
from watchdog.core.settings import Settings
from watchdog.core.text import printable
from watchdog.core.urls import parse_store_url
from watchdog.daemon.child import ChildTicks
from watchdog.daemon.ingest.loader import (
    ChildLoads,
    LoadRequest,
    LoadResult,
    OpenLoadStore,
    load_round,
    open_request_store,
)
from watchdog.daemon.ingest.otlp_grpc import MAX_RECEIVE, TURN_GRACE, GrpcServer
from watchdog.daemon.ingest.otlp_http import HttpServer
from watchdog.daemon.ingest.receiver import Receiver, Refusal
from watchdog.daemon.ingest.signals import SIGNALS, Signal
from watchdog.daemon.ingest.spool import Destination, IngestSpool, Load, SpoolUnusable
from watchdog.daemon.ingest.state import SpoolState, read_spool_state, spool_dir
from watchdog.daemon.runs import Progress
from watchdog.daemon.tick import TickRequest, TickResult

log = logging.getLogger(__name__)

# A load refused this many times in a row while the store works is set aside (spool quarantine).
REFUSALS_BEFORE_ASIDE = 3


def _open_spool(settings: Settings) -> IngestSpool:
    """The spool of `settings`; a directory it cannot use is a config error naming it (exit 2)."""
    try:
        return IngestSpool(
            spool_dir(settings), destinations(settings), retry_window=settings.ingest.retry_window
        )
    except SpoolUnusable as exc:
        raise ConfigError(
            "ingest.spool_dir",
            f"{printable(exc, None)}: the receiver needs a directory it can write"
            " (set [ingest] spool_dir to one)",
        ) from None


def destinations(settings: Settings) -> dict[str, Destination]:
    """Where each signal's rows go: the store (its URL, password masked) and the table."""
    store = parse_store_url(settings.store.url).masked
    return {s: Destination(store, h.table(settings.ingest)) for s, h in SIGNALS.items()}


@dataclass(frozen=True)
class Listening:
    """Where the receiver listens: (host, port) of OTLP/HTTP and OTLP/gRPC, None when not."""

    http: tuple[str, int] | None
    grpc: tuple[str, int] | None


def _joined(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class Loaded:
    """What the loader did, for /metrics and the log."""

    rows: dict[Signal, int] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0))
    rounds: int = 0
    failed_rounds: int = 0
    last_round_s: float = 0.0
    set_aside: int = 0  # rows moved to the quarantine


class Ingest:
    """The OTLP receiver, its spool and its loader, for the daemon (or a test, or the demo)."""

    def __init__(
        self,
        settings: Settings,
        *,
        spool: IngestSpool | None = None,
        loads: ChildLoads | None = None,
        open_fn: OpenLoadStore = open_request_store,
        logs: LogSetup = DEFAULT_LOGS,
        grpc_max_receive: float = MAX_RECEIVE,
        grpc_turn_grace: float = TURN_GRACE,
    ) -> None:
        self.settings = settings
        self.grpc_max_receive = grpc_max_receive  # a call's bound from headers to message
        self.grpc_turn_grace = grpc_turn_grace  # how long a call holds its turn without its message
        self.spool = spool or _open_spool(settings)
        self.turn = threading.Lock()  # the store: one load or one tick at a time
        self.receiver = Receiver(settings.ingest, self.spool, admission=self.admission)
        self.loaded = Loaded()
        self._loads = loads
        self._open = open_fn
        self._logs = logs
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._stopping = False
        self._failing_since: float | None = None
        self._refusals: dict[str, int] = {}
        self._warned: set[str] = set()
        self._spool_said = ""  # the spool problem last logged (said once, not every round)
        self._http: HttpServer | None = None
        self._grpc: GrpcServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def tables(self) -> dict[str, str]:
        return {s: h.table(self.settings.ingest) for s, h in SIGNALS.items()}

    def spool_state(self) -> SpoolState:
        """The spool now: what waits, what was set aside, the room left, whether it can keep more."""
        return read_spool_state(self.spool.directory, self.spool.problem)

    # -- admission ----------------------------------------------------------------------

    def admission(self) -> Refusal | None:
        """None to take a request now; else why not (429/503, with Retry-After)."""
        if self._stopping:
            return Refusal(503, "the receiver is stopping")
        queued, limit = self.spool.queued_bytes, self.settings.ingest.max_queued
        if queued < limit:
            if queued > limit // 4:
                self._wake.set()
            return None
        self._wake.set()
        if self._failing_since is not None:
            return Refusal(503, "the store cannot be used now; what was accepted waits for it")
        return Refusal(429, "more is waiting for the store than ingest.max_queued")

    # -- running ------------------------------------------------------------------------

    def start(self, listen: str | None, grpc_listen: str | None = None) -> Listening:
        """Create the tables (first round), then serve OTLP/HTTP on `listen` and OTLP/gRPC on
        `grpc_listen` (each when given), and load in a thread."""
        self.round()
        tables = " and ".join(self.tables.values())
        http = grpc = None
        try:
            if listen is not None:
                self._http = HttpServer(self.receiver, listen)
                http = self._http.address
                log.info(
                    "receiving OTLP/HTTP on http://%s (/v1/logs, /v1/traces) into %s",
                    _joined(http),
                    tables,
                )
            if grpc_listen is not None:
                self._grpc = GrpcServer(
                    self.receiver,
                    grpc_listen,
                    max_receive=self.grpc_max_receive,
                    turn_grace=self.grpc_turn_grace,
                )
                grpc = self._grpc.address
                log.info("receiving OTLP/gRPC on %s (logs, traces) into %s", _joined(grpc), tables)
        except BaseException:
            self._close_servers()
            raise
        self._thread = threading.Thread(target=self._loop, name="watchdog-ingest", daemon=True)
        self._thread.start()
        return Listening(http, grpc)

    def _close_servers(self) -> None:
        http, self._http = self._http, None
        grpc, self._grpc = self._grpc, None
        if http is not None:
            http.close()
        if grpc is not None:
            grpc.close()

    def refuse_new(self) -> None:
        """From now on, answer every request 503 with Retry-After (the daemon is stopping)."""
        self._stopping = True

    def stop(self, timeout: timedelta = timedelta(seconds=30)) -> None:
        """Refuse new requests (503), finish the ones in progress, load what waits (bounded)."""
        self.refuse_new()
        self._close_servers()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout.total_seconds())
        loader_done = self._thread is None or not self._thread.is_alive()
        if loader_done and self.turn.acquire(timeout=timeout.total_seconds()):
            try:
                self._round_holding_turn()
            finally:
                self.turn.release()
        left = self.spool.queued_bytes
        if left:
            log.info(
                "ingest: %d bytes accepted and not yet loaded wait in %s",
                left,
                self.spool.directory,
            )

    def _loop(self) -> None:
        every = self.settings.ingest.load_every.total_seconds()
        while not self._stop.is_set():
            self._wake.wait(every)
            self._wake.clear()
            if self._stop.is_set():
                break
            if not self._has_work():
                continue
            try:
                self.round()
            except Exception:  # the loader must outlive any bug of one round
                log.exception("ingest: the load round failed unexpectedly; retried")
            self.spool.prune()

    def _has_work(self) -> bool:
        self.spool.rescan()  # batches moved back from quarantine/ are work too
        return self.spool.queued_bytes > 0 or bool(self.spool.planned_loads())

    def round(self) -> LoadResult:
        """Take the store's turn, load what was accepted, mark what is in."""
        with self.turn:
            return self._round_holding_turn()

    def _round_holding_turn(self) -> LoadResult:
        """One round; a spool that cannot be written (a full disk) fails the round, never raises."""
        try:
            return self._rounds()
        except OSError as exc:
            problem = f"cannot write the spool {self.spool.directory}: {exc.strerror}"
            if problem != self._spool_said:
                log.warning("ingest: %s; loading waits for room", problem)
            self._spool_said = problem
            self.loaded.failed_rounds += 1
            return LoadResult(problem=problem)

    def _rounds(self) -> LoadResult:
        result, split = self._load_planned()
        if split:  # a refused load wrote nothing: its batches are tried each alone at once
            again, _ = self._load_planned()
            result = LoadResult(
                outcomes=[*result.outcomes, *again.outcomes],
                problem=again.problem,
                busy=again.busy,
                warnings=[*result.warnings, *again.warnings],
            )
        return result

    def _load_planned(self) -> tuple[LoadResult, bool]:
        """Plan and run the loads; the result, and whether a refused load was split."""
        self.spool.plan()
        loads = self.spool.planned_loads()
        request = LoadRequest(
            store=self.settings.store,
            tables=self.tables,
            loads=tuple(loads),
            lock_wait_s=min(1.0, self.settings.store.lock_timeout.total_seconds()),
            logs=self._logs,
        )
        started = time.monotonic()
        result = (
            self._loads.run(request) if self._loads is not None else load_round(request, self._open)
        )
        self.loaded.last_round_s = time.monotonic() - started
        self.loaded.rounds += 1
        split = self._take(result, {load.token: load for load in loads})
        return result, split

    def _take(self, result: LoadResult, loads: dict[str, Load]) -> bool:
        """Mark what was loaded, split or set aside what was refused; True when a load was split."""
        split = False
        for warning in result.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                log.warning("ingest: %s", warning)
        for outcome in result.outcomes:
            load = loads[outcome.token]
            if outcome.loaded:
                self.spool.done(load)
                self.loaded.rows[Signal(load.signal)] += load.rows
                self._refusals.pop(load.token, None)
            elif outcome.refused and len(load.files) > 1:
                self.spool.split(load)
                split = True
            elif outcome.refused:
                count = self._refusals[load.token] = self._refusals.get(load.token, 0) + 1
                log.warning(
                    "ingest: the store refuses %d %s rows (%s); %s",
                    load.rows,
                    load.signal,
                    outcome.problem,
                    "set aside" if count >= REFUSALS_BEFORE_ASIDE else "tried again next round",
                )
                if count >= REFUSALS_BEFORE_ASIDE:
                    self.spool.set_aside(load, outcome.problem)
                    self.loaded.set_aside += load.rows
                    self._refusals.pop(load.token, None)
        problem = result.problem or next(
            (o.problem for o in result.outcomes if not o.loaded and not o.refused), ""
        )
        if problem:
            self.loaded.failed_rounds += 1
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                if result.busy:
                    log.info("ingest: the store is busy (%s); loading again in a moment", problem)
                else:
                    log.warning(
                        "ingest: cannot load into the store: %s (kept in the spool; a load"
                        " whose outcome is unknown is sent again whole, under its own token)",
                        problem,
                    )
        elif self._failing_since is not None:
            log.info(
                "ingest: loading again after %.0fs; %d bytes wait",
                time.monotonic() - self._failing_since,
                self.spool.queued_bytes,
            )
            self._failing_since = None
        return split


class TurnTakingTicks(ChildTicks):
    """The daemon's ticks, each taking the embedded store's turn from the loader until it has
    closed the store to deliver: loads go on while a slow receiver answers (the tick's writes
    then wait for the engine's own lock between them, as the commands do). A server store
    takes many clients at once: there ticks and loads need no turn."""

    def __init__(self, ingest: Ingest, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ingest = ingest

    def run(
        self,
        request: TickRequest,
        progress: Progress | None = None,
        store_closed: Callable[[], None] | None = None,
    ) -> TickResult:
        if not parse_store_url(request.settings.store.url).embedded:
            return super().run(request, progress, store_closed)
        turn = self.ingest.turn
        turn.acquire()
        held = True

        def release() -> None:  # in this thread only: at the child's word, or at the end
            nonlocal held
            if held:
                held = False
                turn.release()

        def closed() -> None:
            release()
            if store_closed is not None:
                store_closed()

        try:
            return super().run(request, progress, closed)
        finally:
            release()


def records(ingest: Ingest) -> Iterator[tuple[str, str, int]]:
    """(signal, outcome, count) of the receiver's records so far: accepted, rejected, loaded."""
    counts = ingest.receiver.counts
    with counts.lock:
        accepted, rejected = dict(counts.accepted), dict(counts.rejected)
    for signal in SIGNALS:
        yield signal, "accepted", accepted[signal]
        yield signal, "rejected", rejected[signal]
        yield signal, "loaded", ingest.loaded.rows[signal]
