"""The alert lease: at most one process at a time runs the alert lifecycle and delivery of a
source on a server store, and delivers with the embedded store closed; the others stand by
(docs/operations.md#two-watchdogs-on-one-store-the-alert-lease; the protocol is `Lease`'s)."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from alerts.state import ensure_schema, table, table_exists
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms, rfc3339

log = logging.getLogger(__name__)

CLAIM_SETTLE = 0.5  # seconds between writing a claim and reading who won

# The outbox's check before each send: raises LeaseLost when the lease has passed on.
Guard = Callable[[], None]

# On a replicated cluster: a claim is acknowledged by a majority of replicas, one at a
# time, and a read sees every acknowledged claim (or fails).
QUORUM_INSERT = {"insert_quorum": "auto", "insert_quorum_parallel": 0}
QUORUM_SELECT = {"select_sequential_consistency": 1}


@dataclass(frozen=True)
class LeaseInfo:
    """The lease of a source as the store has it: who holds it, until when."""

    source: str
    term: int
    holder: str
    claimed_at: datetime
    expires_at: datetime
    live: bool  # expires_at is ahead of the store's clock
    left: timedelta  # how long until it expires, by the store's clock (negative: expired)

    def describe(self) -> str:
        """`host daemon[123] holds the alert lease of S until T` (or held it)."""
        if self.live:
            return (
                f"{self.holder} holds the alert lease of {self.source}"
                f" until {rfc3339(self.expires_at)}"
            )
        return f"the alert lease of {self.source} is free (last held by {self.holder})"

    def to_json(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "term": self.term,
            "live": self.live,
            "claimed_at": rfc3339(self.claimed_at),
            "expires_at": rfc3339(self.expires_at),
        }


class LeaseLost(Exception):
    """Another process holds the alert lease (or took it over): this one is standby."""

    def __init__(self, holder: LeaseInfo | None) -> None:
        self.holder = holder
        super().__init__(
            holder.describe() if holder is not None else "the alert lease was not held"
        )


def holder_name(role: str) -> str:
    """Who claims: host, command, process id and a nonce (`db1 daemon[4242] 9f3a1c`)."""
    return f"{socket.gethostname()[:64]} {role}[{os.getpid()}] {secrets.token_hex(3)}"


def _settings(settings: Settings, quorum: dict[str, Any]) -> dict[str, Any] | None:
    return dict(quorum) if settings.store.cluster else None


def current_lease(
    store: Store, settings: Settings, source: str, *, known_table: bool = False
) -> LeaseInfo | None:
    """The lease of `source` (the earliest claim of its highest term), None if never claimed.

    Read-only: without the table (an older store, or never claimed) None, unless
    `known_table` says it exists.
    """
    if not known_table and not table_exists(store, settings, "leases"):
        return None
    rows = store.query(
        "SELECT term, holder, toUnixTimestamp64Micro(claimed_at) AS claimed_us,"
        " toUnixTimestamp64Milli(expires_at) AS expires_ms,"
        " toUnixTimestamp64Milli(now64(3)) AS now_ms"
        f" FROM {table(settings, 'leases')} FINAL WHERE source = {{source:String}}"
        " ORDER BY term DESC, claimed_at ASC, holder ASC LIMIT 1",
        {"source": source},
        extra_settings=_settings(settings, QUORUM_SELECT),
    ).dicts()
    if not rows:
        return None
    row = rows[0]
    expires_ms, now_ms = int(row["expires_ms"]), int(row["now_ms"])
    return LeaseInfo(
        source=source,
        term=int(row["term"]),
        holder=str(row["holder"]),
        claimed_at=from_ms(int(row["claimed_us"]) // 1000),
        expires_at=from_ms(expires_ms),
        live=expires_ms > now_ms,
        left=timedelta(milliseconds=expires_ms - now_ms),
    )


class Lease:
    """One process's hold on the alert lease of a source.

    `acquire` claims it (None: held; else the holder's LeaseInfo: standby),
    `ensure` is the checkpoint (renews, or raises LeaseLost), `release` ends it.
    On the embedded store its lock already makes one process at a time: the
    lease is claimed only by `hold_closed`, before a process closes the store
    to deliver (the daemon's ticks), and `acquire` there only reads it, so that
    a process that opens the store meanwhile stands by.

    ClickHouse has no transactions, so the lease is decided by data every reader
    sees alike, every time in it the store's own clock (`now64()`): the lease of
    a source is the earliest claim (`claimed_at`, then the holder's name) of its
    highest `term`, live while `expires_at` is ahead of the store's clock. A
    process that finds it free, expired or released claims the next term, waits
    `CLAIM_SETTLE` (so that a rival claim written at the same moment has landed)
    and reads back who won; a claim the server refuses while a rival's claim of
    that term holds the lease is a lost race, not a store failure. The holder
    renews it when less than half of `alerts.lease_ttl` is left at a checkpoint
    (before each window's lifecycle and each message); with less than a quarter
    left it claims anew, so a renewal never lands after a rival saw it expire. A
    holder that stalls for longer than half the TTL between two checkpoints is
    not fenced (the outbox's send marks still bound its message to two posts).
    On a replicated cluster the writes and reads carry quorum settings.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        holder: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        key: str | None = None,
        ttl: timedelta | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        # What is leased: the alert lifecycle of the source, or `key` (a backfill's table).
        self.source = key or settings.source.display_name
        self.holder = holder
        self.ttl = ttl or settings.alerts.lease_ttl
        self.exclusive = store.url.embedded
        self._clock = clock
        self._sleep = sleep
        self._term = 0
        self._version = 0
        self._deadline = 0.0  # clock() by which the lease has surely expired
        self._schema = False  # the table is known to exist
        self._claimed = False  # on the embedded store: a claim written by `hold_closed`
        self.held = False

    def acquire(self) -> LeaseInfo | None:
        """Hold the lease (None), or say who does (standby)."""
        if self.exclusive:
            # Only a process delivering with the store closed claims it here (`hold_closed`).
            current = current_lease(self.store, self.settings, self.source)
            self.held = current is None or not current.live or current.holder == self.holder
            return None if self.held else current
        if not self._schema:
            ensure_schema(self.store, self.settings)
            self._schema = True
        current = current_lease(self.store, self.settings, self.source, known_table=True)
        if current is not None and current.live and current.holder != self.holder:
            self.held = False
            return current
        if current is not None and current.live and current.left > self.ttl / 4:
            self._renew(current)  # ours, with time to spare (a daemon's next tick)
            return None
        term = (current.term if current is not None else 0) + 1
        started = self._clock()
        try:
            self._write(term, 1, claimed="now64(6)", expires=True)
        except StoreError:
            rival = self._rival(term)  # StoreError too when the store itself fails
            if rival is None:
                raise
            self.held = False
            return rival
        self._sleep(CLAIM_SETTLE)
        winner = current_lease(self.store, self.settings, self.source, known_table=True)
        if winner is None or winner.term != term or winner.holder != self.holder:
            self.held = False
            return winner
        self._term, self._version = term, 1
        self._deadline = started + self.ttl.total_seconds()
        self.held = True
        log.debug("alert lease of %s: term %d held by %s", self.source, term, self.holder)
        return None

    def ensure(self) -> None:
        """The checkpoint: renew when less than half the TTL is left; LeaseLost when passed on."""
        if self.exclusive:
            return
        if not self.held:
            raise LeaseLost(None)
        if self._deadline - self._clock() > self.ttl.total_seconds() / 2:
            return
        holder = self.acquire()
        if holder is not None:
            raise LeaseLost(holder)

    def hold_closed(self) -> None:
        """On the embedded store, before closing it to deliver: claim the lease in it, so that
        a process that opens the store before `release(store)` stands by rather than sending
        the same messages (if this one dies, the claim expires after `alerts.lease_ttl`).

        Nothing on a server store, where the lease is held already. StoreError when the
        claim cannot be written.
        """
        if not self.exclusive:
            return
        ensure_schema(self.store, self.settings)
        current = current_lease(self.store, self.settings, self.source, known_table=True)
        term = (current.term if current is not None else 0) + 1
        self._write(term, 1, claimed="now64(6)", expires=True)
        self._term, self._version, self._claimed, self.held = term, 1, True, True

    def release(self, store: Store | None = None) -> None:
        """End the lease now, so that the next run (of any process) may claim it; never raises.

        `store`: the store opened anew, when this one was closed (after `hold_closed`).
        """
        if not self.held or (self.exclusive and not self._claimed):
            return
        self.held = self._claimed = False
        try:
            self._write(self._term, self._version + 1, claimed=None, expires=False, store=store)
        except StoreError as exc:  # it expires on its own
            log.warning("could not release the alert lease (it expires by itself): %s", exc)

    def _rival(self, term: int) -> LeaseInfo | None:
        """After our claim of `term` was refused: the rival claim of that term (or a later
        one) that holds the lease once it has landed, else None.

        On a replicated cluster a claim is refused while a rival's claim is still reaching
        its quorum (`insert_quorum_parallel = 0`): two daemons of an HA pair claim a
        released lease at the same tick. That is a lost race, not a failing store.
        """
        self._sleep(CLAIM_SETTLE)
        rival = current_lease(self.store, self.settings, self.source, known_table=True)
        if rival is not None and rival.live and rival.term >= term and rival.holder != self.holder:
            return rival
        return None

    def _renew(self, current: LeaseInfo) -> None:
        started = self._clock()
        version = self._version + 1 if current.term == self._term else 2
        self._write(current.term, version, claimed=None, expires=True)
        self._term, self._version = current.term, version
        self._deadline = started + self.ttl.total_seconds()
        self.held = True

    def _write(
        self,
        term: int,
        version: int,
        *,
        claimed: str | None,
        expires: bool,
        store: Store | None = None,
    ) -> None:
        """One row of the lease: a claim (`claimed` the store's clock), or a new version of
        ours keeping its claim time; expiring a TTL from now, or now (a release)."""
        until = "now64(3) + toIntervalMillisecond({ttl_ms:UInt64})" if expires else "now64(3)"
        leases = table(self.settings, "leases")
        if claimed is not None:
            select = f"SELECT {{source:String}}, {{term:UInt64}}, {{holder:String}}, {claimed}"
        else:
            select = (
                "SELECT {source:String}, {term:UInt64}, {holder:String},"
                f" (SELECT max(claimed_at) FROM {leases} WHERE source = {{source:String}}"
                " AND term = {term:UInt64} AND holder = {holder:String})"
            )
        (store or self.store).command(
            f"INSERT INTO {leases} (source, term, holder, claimed_at, expires_at, version)"
            f" {select}, {until}, {{version:UInt64}}",
            {
                "source": self.source,
                "term": term,
                "holder": self.holder,
                "ttl_ms": int(self.ttl.total_seconds() * 1000),
                "version": version,
            },
            extra_settings=_settings(self.settings, QUORUM_INSERT),
        )
