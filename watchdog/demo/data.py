"""Realistic agent-memory telemetry for `memory-watchdog demo`, with faults injected at known counts.

Rows shaped like the joelclaw agent system's own event table (`joelclaw.otel_events`, DDL in
`checks/source_ddl.py`) over the 24 hours before `at`: sessions that recall memory when they
start, call tools, compact and observe, end and observe again, worker observe runs with
write-gate decisions, recalls from the CLI, and sessionless background traffic. Every obligation
the faults break falls due in the default window, the 4 hours before `at`, so a `check` at `at`
finds exactly what `DemoPlan` reports and the earlier windows stay healthy: a system that went
wrong recently, whose counts double as an oracle for integration tests. Its retried rows, and
why a later check counts none: docs/sources.md#data-quality.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from checks.source_ddl import create_table_sql
from watchdog.core.settings import EventSettings
from watchdog.core.sql import is_table_name
from watchdog.demo.builder import (
    Builder,
    build_background,
    build_healthy_sessions,
)
from watchdog.demo.faults import (
    build_fault_sessions,
    inject_deviations,
    inject_failed_observes,
    inject_failure_streak,
    inject_lost_observes,
    inject_slow_recalls,
)
from watchdog.demo.model import (
    BREACH_KINDS,
    EPOCH,
    FAILURE_STREAK,
    INSERT_BATCH,
    JOELCLAW_COLUMNS,
    MIN_SESSIONS,
    MINUTE,
    SECOND,
    DemoPlan,
    Event,
    Writer,
    fault_counts,
)


def _to_ms(moment: datetime) -> int:
    """Epoch milliseconds, rounded down; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def _from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _row(event: Event, received_ms: int) -> list[Any]:
    """The event as a row in JOELCLAW_COLUMNS order."""
    query = event.metadata.get("query")
    text = " ".join(part for part in (event.action, event.component, query, event.error) if part)
    return [
        event.id,
        _from_ms(event.ts),
        event.session_column,
        event.system_id,
        event.level,
        event.source,
        event.component,
        event.action,
        event.success,
        event.duration_ms,
        event.error,
        json.dumps(event.metadata, ensure_ascii=False, separators=(",", ":")),
        list(event.metadata),
        text,
        _from_ms(received_ms),
    ]


# The memory pipeline's own events, which it writes through an outbox and so may write
# twice: what the demo retries. The session checks read every one of them, so each
# retry is a row the report's `data_quality.duplicate_rows` counts.
_SETTINGS_EVENTS = EventSettings()
RETRIED_NAMES = frozenset(
    _SETTINGS_EVENTS.recall_any + _SETTINGS_EVENTS.recall_injected + _SETTINGS_EVENTS.observe_any
)


def _rows(events: list[Event], rng: random.Random, at_ms: int) -> tuple[list[list[Any]], list[int]]:
    """Rows in time order, then ~1% of the memory events again (same id and timestamp, received
    later), as the pipeline's outbox retries them; and the indices of the retried events."""
    old_enough = [
        i for i, e in enumerate(events) if e.ts < at_ms - 20 * MINUTE and e.action in RETRIED_NAMES
    ]
    retried = sorted(rng.sample(old_enough, min(len(old_enough), round(0.01 * len(events)))))
    rows: list[list[Any]] = []
    received: list[int] = []
    for event in events:
        received.append(min(event.ts + rng.randint(20, 1_500), at_ms - 1))
        rows.append(_row(event, received[-1]))
    for i in retried:
        rows.append(_row(events[i], received[i] + rng.randint(SECOND, 10 * MINUTE)))
    return rows, retried


@dataclass(frozen=True)
class DemoData:
    """The demo's events in time order, the ones retried, their joelclaw rows, and the plan."""

    events: list[Event]
    retried: list[Event]  # written (or sent) again after all the events, as an outbox retries
    rows: list[list[Any]]  # `events`, then `retried`, as joelclaw rows
    plan: DemoPlan
    # The sessions faults were injected into, and which (watchdog.demo.model.FAULTS).
    faults: dict[str, tuple[str, ...]] = field(default_factory=dict)


def generate_rows(
    *, sessions: int = 500, seed: int = 0, at: datetime
) -> tuple[list[list[Any]], DemoPlan]:
    """Demo telemetry for the 24 hours before `at`, as rows in JOELCLAW_COLUMNS order.

    The first `plan.events` rows are the events in time order; the
    `plan.duplicates` rows after them are retried writes of some of them.
    The same seed, sessions and `at` give the same rows. Every timestamp is
    before `at` and within 24 hours of it; timestamps are aware UTC
    datetimes with millisecond precision.
    """
    data = generate_demo(sessions=sessions, seed=seed, at=at)
    return data.rows, data.plan


def generate_demo(*, sessions: int = 500, seed: int = 0, at: datetime) -> DemoData:
    """The demo's events and rows (see `generate_rows`); the same seed gives the same data."""
    if sessions < MIN_SESSIONS:
        raise ValueError(f"the demo needs at least {MIN_SESSIONS} sessions, got {sessions}")
    builder = Builder(random.Random(seed), _to_ms(at))
    counts = fault_counts(sessions)
    build_fault_sessions(builder, counts)
    # One session is kept back for the failure streak, placed once the rest exists.
    build_healthy_sessions(builder, sessions - counts.fault_sessions - 1)
    build_background(builder, sessions)
    builder.truncate()
    lost = inject_lost_observes(builder, counts.lost_runs)
    reserved = inject_failure_streak(builder)
    slow = inject_slow_recalls(builder, reserved)
    failed = inject_failed_observes(builder, lost)
    inject_deviations(builder, counts)
    events = builder.kept_events()
    rows, retried = _rows(events, builder.rng, builder.at_ms)
    plan = DemoPlan(
        sessions=len(builder.sessions),
        events=len(events),
        cold_sessions=counts.cold,
        late_recalls=counts.late,
        crashed_sessions=counts.crashed,
        ended_without_observe=counts.ended_without_observe,
        unobserved_compactions=counts.unobserved_compactions,
        lost_observes=lost,
        failed_observes=failed,
        failure_streak=FAILURE_STREAK,
        slow_recalls=slow,
        deviation_breaches=counts.breaches_per_kind * len(BREACH_KINDS),
        deviation_missing_evidence=counts.missing_evidence,
        answered_without_recall=counts.answered_without_recall,
        duplicates=len(retried),
    )
    faults = {s.id: tuple(s.faults) for s in builder.sessions if s.faults}
    return DemoData(events, [events[i] for i in retried], rows, plan, faults)


def write_demo(
    store: Writer, table: str, *, sessions: int = 500, seed: int = 0, at: datetime
) -> DemoPlan:
    """Create `table` (and its database) in the joelclaw layout and fill it with demo telemetry.

    The retried rows are written as a later insert, as an outbox retry
    arrives: ReplacingMergeTree collapses rows of the same key within one
    insert at once, so written in the same batch they would never exist.
    Background merges collapse them later too, so merges of `table` are
    stopped in this process from then on: an evaluation here counts every
    retry (`merge_retries` collapses them when the demo is done).

    Rows are appended: a table that already holds demo rows for another `at`
    will mix both, so the demo command should start from a fresh store.
    """
    if not is_table_name(table):
        raise ValueError(f"not a plain table name: {table!r}")
    database = table.rpartition(".")[0]
    rows, plan = generate_rows(sessions=sessions, seed=seed, at=at)
    if database:
        store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    store.command(create_table_sql("joelclaw", table))
    originals, retries = rows[: plan.events], rows[plan.events :]
    for offset in range(0, len(originals), INSERT_BATCH):
        store.insert(table, originals[offset : offset + INSERT_BATCH], JOELCLAW_COLUMNS)
    store.command(f"SYSTEM STOP MERGES {table}")
    if retries:
        store.insert(table, retries, JOELCLAW_COLUMNS)
    return plan


def merge_retries(store: Writer, table: str) -> None:
    """Merge `table` as ClickHouse would in time: each retried row collapses into its event."""
    store.command(f"SYSTEM START MERGES {table}")
    store.command(f"OPTIMIZE TABLE {table} FINAL")
