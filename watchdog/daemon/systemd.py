"""systemd's notify protocol, spoken directly: READY, WATCHDOG pings, STATUS, RELOADING, STOPPING.

One datagram of `KEY=value` lines to `NOTIFY_SOCKET` per message (sd_notify(3));
pings every half of `WATCHDOG_USEC` while the daemon is healthy; without the
socket every call does nothing, and a send that fails is a debug line, never
raised (systemd is a spectator). The unit and what it watches:
docs/operations.md#with-systemd.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)


def _address(value: str) -> str | None:
    """NOTIFY_SOCKET as a socket address: a path, or `@name` as an abstract one."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # e.g. vsock: addresses, which we do not speak


@dataclass(frozen=True)
class Notify:
    """Where to send notifications (None: not under systemd) and how often to ping."""

    address: str | None = None
    watchdog_usec: int | None = None  # None: no watchdog asked for (or not for this process)

    @classmethod
    def from_environment(cls, env: Mapping[str, str], pid: int | None = None) -> Notify:
        """From NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (see sd_notify(3), sd_watchdog_enabled(3))."""
        raw = env.get("NOTIFY_SOCKET", "").strip()
        address = _address(raw) if raw else None
        if raw and address is None:
            log.warning("NOTIFY_SOCKET %r is not a path nor @abstract: not notifying systemd", raw)
        usec: int | None = None
        text = env.get("WATCHDOG_USEC", "").strip()
        owner = env.get("WATCHDOG_PID", "").strip()
        mine = not owner or (owner.isdigit() and int(owner) == (pid or os.getpid()))
        if text.isdigit() and int(text) > 0 and mine:
            usec = int(text)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def ping_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings: half of WATCHDOG_USEC, as systemd advises."""
        if self.address is None or self.watchdog_usec is None:
            return None
        return self.watchdog_usec / 2e6

    def send(self, *lines: str) -> bool:
        """One datagram of `KEY=value` lines; False when not under systemd or it failed."""
        if self.address is None:
            return False
        data = "\n".join(lines).encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self.address)
                sock.sendall(data)
        except OSError as exc:
            log.debug("systemd notify failed: %s", exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *_status(status))

    def status(self, text: str) -> bool:
        return self.send(*_status(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self, status: str = "") -> bool:
        """Before a reload; send `ready()` when it is done."""
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={now_usec}", *_status(status))

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *_status(status))


def _status(text: str) -> list[str]:
    line = " ".join(text.split())  # one line: a newline would start another assignment
    return [f"STATUS={line}"] if line else []


class Keepalive:
    """Pings the watchdog every `notify.ping_interval` while `healthy()` says so."""

    def __init__(self, notify: Notify, healthy: Callable[[], bool]) -> None:
        self.notify = notify
        self.healthy = healthy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def beat(self) -> bool:
        """One beat: ping when healthy; True when a ping went out."""
        try:
            healthy = self.healthy()
        except Exception as exc:  # a broken health check is not healthy
            log.warning("health check failed: %s", exc)
            healthy = False
        if not healthy:
            if not self._warned:
                log.error("not healthy: no more systemd watchdog pings (systemd will restart it)")
                self._warned = True
            return False
        self._warned = False
        return self.notify.watchdog()

    def start(self) -> None:
        """Start pinging in a daemon thread (nothing when systemd asked for no watchdog)."""
        interval = self.notify.ping_interval
        if interval is None or self._thread is not None:
            return
        self.beat()

        def loop() -> None:
            while not self._stop.wait(interval):
                self.beat()

        self._thread = threading.Thread(target=loop, name="systemd-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
