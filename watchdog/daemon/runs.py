"""What a tick tells the daemon of each window, and its delivery once the store is closed.

Each window's `RunResult` is told as soon as it is judged; on the embedded
store the tick's messages wait in the outbox until it has closed the store,
`deliver_closed` sends them opening the store only for each read and write,
and the last window's run is told with that delivery folded in
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime

from alerts.base import Notifier, Timer
from alerts.lease import Lease
from alerts.outbox import DeliveryReport
from alerts.pipeline import ProcessOutcome, deliver
from alerts.records import outbox_backlog
from checks.base import Report, Window
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import Clock
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.status import StoreRead, read_store
from watchdog.daemon.telemetry import CheckTiming

log = logging.getLogger(__name__)

OpenStore = Callable[[Settings], AbstractContextManager[Store]]
Progress = Callable[["RunResult"], None]
STATUS_RUNS = 10  # runs in the status document served by `daemon --http`


@dataclass(frozen=True)
class RunResult:
    """One window's run, for the daemon's telemetry and log."""

    window: Window
    catchup: bool
    status: RunOutcome
    start_ns: int
    end_ns: int
    report: Report | None = None
    timings: Mapping[str, CheckTiming] = field(default_factory=dict)
    problem: str = ""
    summary: str = ""  # the alert pipeline's one line
    delivered: int = 0
    failed: tuple[str, ...] = ()  # delivery errors, one line each
    given_up: tuple[str, ...] = ()  # of those, the messages given up for good (dropped, ...)
    backlog: Mapping[str, int] | None = None  # pending outbox rows per notifier
    firing: tuple[str, ...] = ()  # check ids firing after it (`store` among them, maybe)
    standby: bool = False  # evaluated only: another process holds the alert lease

    @property
    def judged(self) -> bool:
        return self.status != RunOutcome.STORE_ERROR

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def summary_of(outcome: ProcessOutcome, *, delivered: bool) -> str:
    """The pipeline's line for a run; one whose delivery comes later says its messages wait."""
    if delivered:
        return outcome.summary()
    return replace(outcome, delivery=DeliveryReport(pending=len(outcome.enqueued))).summary()


def with_delivery(
    run: RunResult,
    outcome: ProcessOutcome,
    delivery: DeliveryReport,
    backlog: Mapping[str, int] | None,
) -> RunResult:
    """`run` (whose messages waited) with the tick's delivery after it, ending now."""
    return replace(
        run,
        end_ns=time.time_ns(),
        summary=replace(outcome, delivery=delivery).summary(),
        delivered=len(delivery.delivered),
        failed=tuple(delivery.errors),
        given_up=tuple(delivery.given_up),
        backlog=backlog if backlog is not None else run.backlog,
    )


@dataclass
class Reports:
    """Tells the daemon each window's run as soon as it is judged; with `hold` (delivery after
    the store is closed), the latest run whose messages wait is held back, for `take` to
    fold the delivery into it, and told when the next one comes (or by `flush`)."""

    progress: Progress | None = None
    hold: bool = False
    held: tuple[RunResult, ProcessOutcome] | None = None

    def run(self, run: RunResult, outcome: ProcessOutcome | None = None) -> None:
        """One window's run; `outcome` when its alert pipeline ran (without delivering)."""
        if self.hold and outcome is not None:
            self.flush()
            self.held = (run, outcome)
        else:
            self.tell(run)

    def flush(self) -> None:
        """Tell the run held back, as it is."""
        held, self.held = self.held, None
        if held is not None:
            self.tell(held[0])

    def take(self) -> tuple[RunResult, ProcessOutcome] | None:
        """The run held back (its caller tells it), if any."""
        held, self.held = self.held, None
        return held

    def tell(self, run: RunResult) -> None:
        """Tell the daemon one run now."""
        if self.progress is not None:
            self.progress(run)


def backlog_of(store: Store, settings: Settings, now: datetime) -> dict[str, int] | None:
    """The pending outbox rows per notifier; None (said) when they cannot be read."""
    try:
        return {b.notifier: b.pending for b in outbox_backlog(store, settings, now=now)}
    except StoreError as exc:
        log.warning("cannot read the outbox backlog: %s", exc.problem)
        return None


def waiting(store: Store, settings: Settings, now: datetime) -> bool:
    """Whether a message may be waiting to go now (pending, not held for quiet hours)."""
    try:
        backlog = outbox_backlog(store, settings, now=now)
    except StoreError:
        return True  # cannot tell: delivery reads the outbox itself
    return any(b.pending > b.held for b in backlog)


@dataclass(frozen=True)
class Access:
    """How a tick's delivery reaches the store and the receivers once the store is closed."""

    open_store_fn: OpenStore
    notifiers: Mapping[str, Notifier]
    clock: Clock
    timer: Timer | None = None
    lease: Lease | None = None  # claimed in the store before it was closed (`claim_closed`)


def claim_closed(lease: Lease) -> None:
    """Claim the alert lease before closing the embedded store to deliver (Lease.hold_closed);
    a claim that cannot be written is said, and the delivery goes on."""
    try:
        lease.hold_closed()
    except StoreError as exc:  # only a process opening the store meanwhile could send twice
        log.warning("could not claim the alert lease before delivering: %s", exc.problem)


@dataclass(frozen=True)
class Delivered:
    """A delivery with the store closed, and the outbox backlog and status read after it
    (None when the store could not be read then)."""

    delivery: DeliveryReport
    backlog: Mapping[str, int] | None = None
    status: StoreRead | None = None


def deliver_closed(access: Access, settings: Settings, *, status: bool) -> Delivered:
    """Deliver what waits in the outbox, opening the store only for each read and write (the
    receiver's loads and the commands use it in between); then give the alert lease back, read
    the backlog, and the status document when `status`. Never raises StoreError: the outbox
    keeps what is left."""
    try:
        delivery = deliver(
            lambda: access.open_store_fn(settings),
            settings,
            now=access.clock(),
            notifiers=access.notifiers,
            timer=access.timer,
        )
    except StoreError as exc:  # the next run sends what is left
        delivery = DeliveryReport(errors=(f"the store failed while delivering: {exc.problem}",))
    try:
        with access.open_store_fn(settings) as store:
            if access.lease is not None:
                access.lease.release(store)
            backlog = backlog_of(store, settings, access.clock())
            document = read_store(store, settings, access.clock(), STATUS_RUNS) if status else None
    except StoreError as exc:
        log.warning(
            "cannot read the outbox backlog after delivering (the alert lease expires by"
            " itself): %s",
            exc.problem,
        )
        return Delivered(delivery)
    return Delivered(delivery, backlog, document)
