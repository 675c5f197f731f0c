"""The narrow table's backfill: what the source holds and the narrow table lacks, a chunk at a time.

The views come first (checks/materialize.py), so every row inserted from
then on reaches the narrow table, and the views that feed from it (the
session state), by them. The backfill then copies the rest: for each chunk
of time (an hour by default), the source's rows as narrow rows, less as many
copies of each as the narrow table holds already (a multiset difference on
the whole row, so a row the source holds twice is copied twice, and a row
the views took in is not copied again). A chunk is first staged (what the
source holds, counted), then the inserts in flight when it was staged are
waited for (their rows reach the narrow table through the views), then the
difference is copied and the chunk recorded done in `materialize_backfill`:
a chunk done is not redone, one cut short is finished without doubling a row.
Rows stamped ahead of the clock fall in the last chunk, open-ended
(docs/performance.md#a-narrow-table-for-large-deployments).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from checks.materialize import BackfillSql, Chunk
from watchdog.core.store import Store
from watchdog.core.times import to_ms

CHUNK = timedelta(hours=1)
IN_FLIGHT_WAIT_S = 60.0  # the longest wait for inserts running when a chunk was staged


@dataclass(frozen=True)
class Backfill:
    """Runs a narrow table's backfill (its statements: `BackfillSql`) chunk by chunk."""

    sql: BackfillSql

    def target(self, store: Store) -> str:
        """The narrow table as the record of chunks names it: its name and its UUID, so that a
        table dropped and made again starts over."""
        database, _, name = self.sql.plan.storage.partition(".")
        rows = store.query(
            "SELECT toString(uuid) FROM system.tables"
            " WHERE database = {db:String} AND name = {name:String}",
            {"db": database, "name": name},
        ).rows
        return f"{self.sql.plan.storage} {rows[0][0] if rows else ''}"

    def chunks(self, store: Store, since: datetime, now: datetime, every: timedelta) -> list[Chunk]:
        """The chunks holding source rows from `since` on, oldest first, aligned to `every`;
        the one holding `now` runs open-ended (rows stamped ahead of the clock)."""
        step = int(every.total_seconds() * 1000)
        start = to_ms(since) // step * step
        last = to_ms(now) // step * step
        found = store.query(
            f"SELECT DISTINCT intDiv(toUnixTimestamp64Milli({self.sql.source_ts}), {{step:Int64}})"
            f" AS k FROM {self.sql.plan.source_table}"
            f" WHERE {self.sql.source_ts} >= fromUnixTimestamp64Milli({{since_ms:Int64}}, 'UTC')"
            " ORDER BY k",
            {"step": step, "since_ms": start},
        ).rows
        keys = sorted({int(k) * step for (k,) in found if int(k) * step < last})
        return [
            *(Chunk(max(k, start), k + step) for k in keys),
            Chunk(max(last, start), None),
        ]

    def done(self, store: Store, target: str) -> list[Chunk]:
        rows = store.query(
            f"SELECT chunk_from, chunk_until FROM {self.sql.progress} WHERE target = {{t:String}}",
            {"t": target},
        ).rows
        return [Chunk(int(a), int(b) or None) for a, b in rows]

    def run(
        self,
        store: Store,
        *,
        since: datetime,
        now: datetime,
        every: timedelta = CHUNK,
        say: Callable[[str], None] = print,
        guard: Callable[[], None] = lambda: None,
    ) -> int:
        """Copy every chunk not done yet; a line per chunk; the rows copied.

        `guard` runs before each statement that writes (the backfill's lock in the store:
        it renews it, or raises to stop when another run holds it)."""
        for sql in self.sql.setup_sql():
            store.command(sql)
        target = self.target(store)
        done = self.done(store, target)
        chunks = self.chunks(store, since, now, every)
        copied_all = 0
        for number, chunk in enumerate(chunks, 1):
            place = f"({number}/{len(chunks)})"
            if any(_covers(d, chunk) for d in done):
                say(f"-- backfill {chunk.label()}: done earlier {place}")
                continue
            copied = self._copy(store, chunk, guard)
            guard()
            store.insert(
                self.sql.progress,
                [[target, chunk.start_ms, chunk.end_ms or 0, copied, datetime.now(UTC)]],
                ["target", "chunk_from", "chunk_until", "copied", "done_at"],
            )
            copied_all += copied
            say(f"-- backfill {chunk.label()}: {copied} rows copied {place}")
        return copied_all

    def _copy(self, store: Store, chunk: Chunk, guard: Callable[[], None]) -> int:
        """Stage the chunk, wait for the inserts in flight, copy what the narrow table lacks."""
        guard()
        store.command(f"TRUNCATE TABLE {self.sql.staging}")  # what a run cut short left
        staged_at = time.monotonic()
        guard()
        store.command(self.sql.stage_sql(chunk), chunk.params())
        self._wait_for_inserts(store, staged_at, guard)
        missing = int(store.query(self.sql.missing_sql(chunk), chunk.params()).rows[0][0] or 0)
        if missing:
            guard()
            store.command(self.sql.copy_staged_sql(chunk), chunk.params())
        return missing

    def _wait_for_inserts(self, store: Store, since: float, guard: Callable[[], None]) -> None:
        """Until every insert running when the chunk was staged has ended: its rows in the
        source reach the narrow table through the views once it ends (bounded)."""
        processes = (
            f"clusterAllReplicas('{self.sql.cluster}', system.processes)"
            if self.sql.cluster
            else "system.processes"
        )
        deadline = time.monotonic() + IN_FLIGHT_WAIT_S
        while time.monotonic() < deadline:
            running = store.query(
                f"SELECT count() FROM {processes}"
                " WHERE query_kind = 'Insert' AND elapsed >= {age:Float64}",
                {"age": time.monotonic() - since},
            ).rows[0][0]
            if not running:
                return
            guard()
            time.sleep(0.1)


def _covers(done: Chunk, chunk: Chunk) -> bool:
    """Whether a chunk recorded done holds all of `chunk`'s time."""
    if done.start_ms > chunk.start_ms:
        return False
    if done.end_ms is None:
        return True
    return chunk.end_ms is not None and done.end_ms >= chunk.end_ms
