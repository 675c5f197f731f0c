"""Delivery lanes: each receiver's messages in order on a lane of its own, every receiver at
once, the whole delivery within `alerts.delivery_timeout` end to end, the store used only from
the caller's thread (docs/alerts.md#the-outbox-never-lost-at-most-one-duplicate)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from alerts.base import Deadline, DeliveryError, Message, Notifier, Timer
from watchdog.core.durations import format_duration

Row = TypeVar("Row")

# The longest the caller waits past the deadline for a send that ends on its own
# (a cut request reporting back): a grace, not a second budget.
GRACE = 0.5


@dataclass
class _Lane(Generic[Row]):
    """One receiver: its rows still to send, and its worker thread."""

    name: str
    notifier: Notifier
    rows: deque[tuple[Row, Message]]
    deadline: Deadline
    inbox: queue.Queue[tuple[Row, Message] | None] = field(default_factory=queue.Queue)
    in_flight: Row | None = None
    stopped: bool = False

    def start(
        self, outcomes: queue.Queue[tuple[_Lane[Row], Row, DeliveryError | BaseException | None]]
    ) -> None:
        def work() -> None:
            while (job := self.inbox.get()) is not None:
                row, message = job
                outcomes.put((self, row, _send(self.notifier, message, self.deadline)))

        threading.Thread(target=work, name=f"deliver {self.name}", daemon=True).start()


def _send(
    notifier: Notifier, message: Message, deadline: Deadline
) -> DeliveryError | BaseException | None:
    """One send; a failure as a DeliveryError (a notifier's bug is retried later).

    Anything that is no Exception (the process being told to end) is handed to the
    caller's thread, which raises it: as in one thread, nothing after it runs.
    """
    try:
        notifier.send(message, deadline)
    except DeliveryError as exc:
        return exc
    except Exception as exc:
        return DeliveryError(notifier.name, f"{type(exc).__name__}: {exc}")
    except BaseException as exc:
        return exc
    return None


@dataclass(frozen=True)
class LaneWork(Generic[Row]):
    """What one lane is to send: its receiver and its rows with their messages, in order."""

    notifier: Notifier
    rows: Sequence[tuple[Row, Message]]


@dataclass(frozen=True)
class LanesResult(Generic[Row]):
    """What is left: each lane's unsent rows, and the lanes the deadline stopped."""

    left: Mapping[str, Sequence[Row]]
    timed_out: frozenset[str]


class Halt(Exception):
    """Raised by `before`: every lane stops (the alert lease passed on)."""


def deliver_lanes(
    work: Mapping[str, LaneWork[Row]],
    total: timedelta,
    *,
    timer: Timer | None = None,
    before: Callable[[Row, Message], Message | None],
    after: Callable[[Row, DeliveryError | None], bool],
) -> LanesResult[Row]:
    """Send every lane's rows, each lane in order, all at once, within `total`.

    Each receiver is a lane, its rows sent one after the other on a worker thread
    of its own, so that a receiver that hangs or trickles its answer holds up its
    own lane only. When `total` is over, a send still in flight is abandoned as a
    transient failure ("no answer within alerts.delivery_timeout") and retried at
    the next run; receivers over HTTP cut their own request at the deadline
    (alerts.receivers.http), a client that cannot be cut (slack-sdk) is left to
    its socket timeout on a daemon thread that never blocks the process's exit.

    `before(row, message)` runs before each send and gives the message to send, or
    None when the row is settled without one (a silence added since: the lane goes on
    to its next row); raising Halt stops every lane. `after(row, error)` records each
    outcome (False stops that lane).
    """
    base = timer or Timer()
    overall = Deadline(total, base)
    outcomes: queue.Queue[tuple[_Lane[Row], Row, DeliveryError | BaseException | None]] = (
        queue.Queue()
    )
    lanes = [
        _Lane(name, w.notifier, deque(w.rows), Deadline(total, base.lane()))
        for name, w in work.items()
        if w.rows
    ]
    halted = False
    timed_out: set[str] = set()

    def dispatch(lane: _Lane[Row]) -> None:
        nonlocal halted
        while True:
            if lane.rows and lane.deadline.expired():
                timed_out.add(lane.name)
            if halted or lane.stopped or not lane.rows or lane.deadline.expired():
                lane.stopped = True
                return
            row, message = lane.rows[0]
            try:
                send = before(row, message)
            except Halt:
                halted = True
                lane.stopped = True
                return
            lane.rows.popleft()
            if send is not None:
                lane.in_flight = row
                lane.inbox.put((row, send))
                return

    for lane in lanes:
        lane.start(outcomes)
        dispatch(lane)
    while any(lane.in_flight is not None for lane in lanes):
        try:
            lane, row, error = outcomes.get(timeout=overall.remaining() + GRACE)
        except queue.Empty:
            break  # the deadline passed with sends in flight
        lane.in_flight = None
        if error is not None and not isinstance(error, DeliveryError):
            for other in lanes:
                other.inbox.put(None)
            raise error
        if not after(row, error):
            lane.stopped = True
        dispatch(lane)
    for lane in lanes:
        lane.inbox.put(None)  # the worker ends after its send, if one is still running
        if lane.in_flight is not None:  # abandoned: retried at the next run
            timed_out.add(lane.name)
            after(
                lane.in_flight,
                DeliveryError(
                    lane.name,
                    f"no answer within alerts.delivery_timeout ({format_duration(total)})",
                ),
            )
    left = {lane.name: [row for row, _ in lane.rows] for lane in lanes if lane.rows}
    return LanesResult(left, frozenset(timed_out))
