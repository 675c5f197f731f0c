"""Each daemon tick in a fresh child process, so the embedded engine never lives in the daemon.

Why (the engine's leak, a crash costing one tick, a stuck tick killed):
docs/architecture.md#why-ticks-run-in-a-child-process. Everything crossing the process boundary
is a plain picklable value: `TickRequest` in, each window's `RunResult` as it is judged, a word
when the tick has closed the store to deliver (the daemon's OTLP loads may have it meanwhile),
then the `TickResult`. When the child dies without a result, `ChildCrashed` carries the runs it
had finished and how it died, in words (a signal by name: SIGKILL is what the OOM killer and
`kill -9` send).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

from alerts.notifiers import build_notifiers
from watchdog.core.logs import configure_logging
from watchdog.core.times import system_clock
from watchdog.daemon.runs import Progress, RunResult
from watchdog.daemon.tick import StopFlag, TickRequest, TickResult, open_settings_store, run_tick


def _child_main(request: TickRequest, writer: Connection, stop: StopFlag) -> None:
    """The child: finish the tick whatever signal the terminal or service manager sends.

    SIGINT and SIGTERM stop the daemon after this tick, SIGHUP reloads its config
    for the next one: the daemon handles them, the tick ignores them.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    configure_logging(request.logs)
    logging.getLogger("watchdog").setLevel(logging.DEBUG if request.logs.debug else logging.INFO)
    result = run_tick(
        request,
        open_store_fn=open_settings_store,
        notifiers=build_notifiers(request.settings),
        clock=system_clock,
        stop=stop,
        progress=lambda run: writer.send((_RUN, run)),
        store_closed=lambda: writer.send((_STORE_CLOSED, None)),
    )
    writer.send((_DONE, result))
    writer.close()


# What the child sends: each window's run, that it closed the store to deliver, the result.
_RUN, _STORE_CLOSED, _DONE = "run", "store closed", "done"


@contextlib.contextmanager
def _hangup_ignored() -> Iterator[None]:
    """SIGHUP ignored while the block runs, so processes started in it inherit SIG_IGN.

    Only the main thread may set a signal's handler; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


class StopSignal:
    """The daemon's "stop after this window", shared with its tick processes, lock-free.

    A multiprocessing.Event takes a lock shared by every process on each
    `is_set()`: a tick killed while holding it (SIGKILL between two windows)
    leaves it held, and every later tick then hangs on its first check. One
    shared byte, written by the daemon and read by the ticks, has no lock to
    leave behind.
    """

    def __init__(self, ctx: Any) -> None:
        self._flag = ctx.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._flag.value = True

    def is_set(self) -> bool:
        return bool(self._flag.value)


class ChildCrashed(Exception):
    """The tick's process ended without a result (killed, or the engine crashed).

    `runs` are the windows it had judged (and reported) before it died.
    """

    def __init__(self, problem: str, runs: list[RunResult]) -> None:
        super().__init__(problem)
        self.problem = problem
        self.runs = runs


def describe_exit(code: int | None) -> str:
    """How a process ended, in words: `killed by SIGKILL (signal 9)`, `exit code 1`."""
    if code is None:
        return "an unknown end"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "a signal"
        return f"killed by {name} (signal {-code})"
    return f"exit code {code}"


# Queries, lock waits and deliveries each have their own timeouts; this bounds a tick
# that hangs anyway, so that one stuck engine never stops the schedule for good.
TICK_TIMEOUT = timedelta(hours=1)


class ChildTicks:
    """Runs each tick in a fresh process forked from a clean forkserver (no engine in it).

    The engine's leak of threads per store opened and closed (chdb 4.4) is the same through
    `chdb.connect` and `chdb.session.Session`: no way of opening the store in the daemon avoids it.
    """

    def __init__(self, timeout: timedelta = TICK_TIMEOUT) -> None:
        self.timeout = timeout
        self._ctx = multiprocessing.get_context("forkserver")
        # Pure-Python modules only: importing chdb starts threads, which must not be forked.
        self._ctx.set_forkserver_preload(["watchdog.daemon.child"])
        self.stop_flag = StopSignal(self._ctx)
        with _hangup_ignored():
            # The helper processes start now (the forkserver starts the resource tracker),
            # and keep ignoring SIGHUP: a hangup of the whole process group (a closed
            # terminal) reloads the daemon, and must not kill them.
            forkserver.ensure_running()
        self._child: Any = None

    def run(
        self,
        request: TickRequest,
        progress: Progress | None = None,
        store_closed: Callable[[], None] | None = None,
    ) -> TickResult:
        """Run one tick in a child and return its result; ChildCrashed when it died without one.

        `progress` is told each window's run as the child reports it, `store_closed`
        when the child has closed the store to deliver (it opens it again only for
        each read and write, waiting for the engine's lock as the commands do).
        """
        reader, writer = self._ctx.Pipe(duplex=False)
        child = self._ctx.Process(
            target=_child_main, args=(request, writer, self.stop_flag), name="memory-watchdog-tick"
        )
        child.start()
        self._child = child
        writer.close()
        runs: list[RunResult] = []
        deadline = time.monotonic() + self.timeout.total_seconds()
        try:
            while True:
                if not reader.poll(max(0.0, deadline - time.monotonic())):
                    child.kill()
                    raise ChildCrashed(
                        f"the run process took longer than {self.timeout}; killed it", runs
                    )
                kind, value = reader.recv()
                if kind == _DONE:
                    result: TickResult = value
                    break
                if kind == _STORE_CLOSED:
                    if store_closed is not None:
                        store_closed()
                    continue
                runs.append(value)
                if progress is not None:
                    progress(value)
        except EOFError:
            child.join(timeout=10)
            raise ChildCrashed(
                f"the run process died before it finished: {describe_exit(child.exitcode)}", runs
            ) from None
        finally:
            reader.close()
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join(timeout=10)
            self._child = None
        return result

    @property
    def running(self) -> bool:
        """Whether a tick's process is alive."""
        child = self._child
        return child is not None and bool(child.is_alive())

    def kill(self) -> None:
        """Kill the tick in progress, if any (the stop timeout has passed)."""
        child = self._child
        if child is not None and child.is_alive():
            child.kill()
