"""A small event builder: scenarios that read like the rules they pin.

scenario = Scenario()
scenario.session("s1").starts(t0).recalls(t0 + 2 * S).ends(t0 + 30 * M).observes(t0 + 31 * M)
report = evaluate(store, scenario, at=t0 + 4 * H)
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from checks.base import Report
from checks.source_ddl import create_table_sql
from watchdog.core.settings import Plugins, Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

S = timedelta(seconds=1)
M = timedelta(minutes=1)
H = timedelta(hours=1)
T0 = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)

JOELCLAW_COLUMNS = (
    "id",
    "timestamp",
    "sessionId",
    "source",
    "component",
    "action",
    "success",
    "duration_ms",
    "error",
    "metadata_json",
    "received_at",
)


@dataclass
class Event:
    """One joelclaw row, before it is written."""

    name: str
    ts: datetime
    session: str | None
    id: str
    meta: dict[str, Any] = field(default_factory=dict)
    duration_ms: int | None = None
    success: int = 1
    source: str = "interactive"
    component: str = "memory-enforcer"
    session_column: str | None = "interactive"
    metadata_json: str | None = None  # raw metadata text, overriding `meta`
    error: str = ""

    def row(self, received_at: datetime) -> list[Any]:
        meta = dict(self.meta)
        if self.session is not None and "session_id" not in meta and "sessionId" not in meta:
            meta["session_id"] = self.session
        text = self.metadata_json if self.metadata_json is not None else json.dumps(meta)
        return [
            self.id,
            self.ts,
            self.session_column,
            self.source,
            self.component,
            self.name,
            self.success,
            self.duration_ms,
            self.error,
            text,
            received_at,
        ]


class Scenario:
    """Events of many sessions, written into a fresh joelclaw-shaped table."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._ids = itertools.count(1)

    def next_id(self) -> str:
        return f"ev-{next(self._ids):06d}"

    def event(self, name: str, ts: datetime, session: str | None = None, **fields: Any) -> Event:
        event = Event(
            name=name, ts=ts, session=session, id=fields.pop("id", None) or self.next_id(), **fields
        )
        self.events.append(event)
        return event

    def session(self, session_id: str) -> SessionBuilder:
        return SessionBuilder(self, session_id)

    def duplicate(self, event: Event) -> Event:
        """The same event id written again (a retry from the agent's outbox)."""
        copy = Event(**{**event.__dict__, "meta": dict(event.meta)})
        self.events.append(copy)
        return copy

    def write(self, store: Store, table: str) -> None:
        database = table.split(".")[0]
        store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        store.command(create_table_sql("joelclaw", table, ttl=False))
        received = datetime(2026, 12, 1, tzinfo=UTC)
        rows = [e.row(received + i * timedelta(milliseconds=1)) for i, e in enumerate(self.events)]
        store.insert(table, rows, JOELCLAW_COLUMNS)


@dataclass
class SessionBuilder:
    """Fluent events of one session."""

    scenario: Scenario
    id: str

    def emits(self, name: str, ts: datetime, **fields: Any) -> SessionBuilder:
        self.scenario.event(name, ts, self.id, **fields)
        return self

    def starts(self, ts: datetime) -> SessionBuilder:
        return self.emits("session.started", ts)

    def recalls(
        self, ts: datetime, *, latency_ms: float = 800, result_count: int = 0, fails: bool = False
    ) -> SessionBuilder:
        """A recall: started at ts, completed (or failed) after its latency."""
        self.emits("memory.recall.started", ts)
        done = ts + timedelta(milliseconds=latency_ms)
        if fails:
            return self.emits("memory.recall.failed", done, success=0, error="operation_failed")
        return self.emits(
            "memory.recall.completed",
            done,
            meta={"latency_ms": latency_ms, "result_count": result_count},
        )

    def injects(self, ts: datetime) -> SessionBuilder:
        return self.emits("memory.recall.injected", ts)

    def compacts(self, ts: datetime) -> SessionBuilder:
        return self.emits("compaction.before", ts)

    def observes(self, ts: datetime, *, fails: bool = False, lost: bool = False) -> SessionBuilder:
        """An observe: requested at ts, then stored (or failed) a second later; lost never finishes."""
        self.emits("memory.observe.requested", ts)
        if lost:
            return self
        if fails:
            return self.emits("observe.store.failed", ts + S, success=0, error="store failed")
        return self.emits("observe.store.completed", ts + S, meta={"sessionId": self.id})

    def asks(self, ts: datetime, *, kind: str | None = None, **fields: Any) -> SessionBuilder:
        """A human message; `kind` (a greeting, an ack...) when the emitter names one."""
        meta = {"kind": kind} if kind is not None else {}
        return self.emits("message.received", ts, meta=meta, **fields)

    def answers(self, ts: datetime) -> SessionBuilder:
        """The agent's response."""
        return self.emits("message.sent", ts)

    def ends(self, ts: datetime) -> SessionBuilder:
        return self.emits("session.ended", ts)

    def deviates(
        self, ts: datetime, payload: dict[str, Any] | str, **fields: Any
    ) -> SessionBuilder:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return self.emits("anamnese.agent_deviation", ts, metadata_json=text, **fields)


def unique_table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}.otel_events"


def settings_for(
    table: str, config: dict[str, Any] | None = None, *, plugins: Plugins = PLUGINS
) -> Settings:
    """Settings reading `table` with the joelclaw preset, plus any config overrides, of the
    registry `plugins` (a test's own, when it adds a plugin)."""
    data: dict[str, Any] = {
        k: dict(v) if isinstance(v, dict) else v for k, v in (config or {}).items()
    }
    source = dict(data.get("source", {}))
    source.setdefault("table", table)
    data["source"] = source
    return settings_from_mapping(data, plugins=plugins, env={})


def evaluate(
    store: Store,
    scenario: Scenario,
    at: datetime,
    config: dict[str, Any] | None = None,
    *,
    length: timedelta | None = None,
) -> Report:
    """Write the scenario into a fresh table and evaluate the window ending at `at`."""
    table = unique_table()
    scenario.write(store, table)
    settings = settings_for(table, config)
    return run_once(store, settings, window_at(settings, at, length))


def evaluate_table(
    store: Store,
    table: str,
    at: datetime,
    config: dict[str, Any],
    *,
    length: timedelta | None = None,
) -> Report:
    """Evaluate an already written table."""
    settings = settings_for(table, config)
    return run_once(store, settings, window_at(settings, at, length))
