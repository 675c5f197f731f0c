"""Realistic agent-memory telemetry for `memory-watchdog demo`, with faults injected at known counts.

The rows are shaped like the joelclaw agent system's own event table
(`joelclaw.otel_events`, DDL in `checks/schemas.py`): sessions that recall
memory when they start, call tools, compact and observe, end and observe
again, worker observe runs with write-gate decisions, recalls from the CLI,
and sessionless background traffic, spread over the 24 hours before `at`.

On top of that healthy base, faults are injected so that every obligation
they break falls due in the default window, the 4 hours before `at`. A
`check` at `at` therefore finds exactly what `DemoPlan` reports, and the
earlier windows stay healthy: the demo tells a story of a system that went
wrong recently, and the counts double as an oracle for integration tests.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from checks.source_ddl import create_table_sql

JOELCLAW_COLUMNS = (
    "id",
    "timestamp",
    "sessionId",
    "systemId",
    "level",
    "source",
    "component",
    "action",
    "success",
    "duration_ms",
    "error",
    "metadata_json",
    "metadata_keys",
    "search_text",
    "received_at",
)

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

# The watchdog's defaults (SPEC section 4): faults are placed against them.
WINDOW_MS = 4 * HOUR
LOOKBACK_MS = 24 * HOUR
RECALL_GRACE_MS = 5 * MINUTE
OBSERVE_GRACE_MS = 15 * MINUTE
IDLE_TIMEOUT_MS = 6 * HOUR
SLOW_RECALL_MS = 3_000

FAILURE_STREAK = 5
# Well above the 5% target, so the breach is not a rounding accident.
TARGET_OBSERVE_FAILURE_RATE = 0.10
# Below this the last 4 hours hold too few observe outcomes to carry a streak and a rate.
MIN_SESSIONS = 100
INSERT_BATCH = 10_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_AGENTS = ("po", "arquiteto", "dev")
_DEVIATION_TYPES = ("laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario")
_BREACH_KINDS = ("extra_key", "unknown_tipo", "too_many_ids", "duplicate_ids")
_TOOLS = ("bash", "read", "edit", "write", "grep", "glob", "web_fetch", "todo_write")
_HANDLE_WORDS = ("bright-otter", "calm-heron", "swift-lynx", "quiet-fox", "amber-owl", "bold-yak")
_VERDICTS = ("allow", "hold", "discard")
# Discard well below the 0.7 drift target: the write gate is healthy in the demo.
_VERDICT_WEIGHTS = (0.62, 0.24, 0.14)
_STORE_ERRORS = (
    "store timeout after 30s for id {n}",
    "qdrant upsert failed: 503 Service Unavailable (id {n})",
    "embedding request failed: connection reset by peer (batch {n})",
)
_TOPICS = (
    "the ClickHouse TTL on otel_events",
    "gateway webhook retries",
    "how we deploy the observe worker",
    "the redis outage last Tuesday",
    "the memory circuit breaker thresholds",
    "migrating embeddings to the new model",
    "qdrant collection settings for memories",
    "the pi extension config for sessions",
    "the ingress for the gateway on k8s",
    "slack alert formatting rules",
    "recall ranking weights and recency decay",
    "Joel's preferences for commit messages",
    "the video ingest pipeline",
    "inngest function concurrency limits",
    "the typesense schema for transcripts",
    "why compaction drops tool output",
)
_QUERY_TEMPLATES = (
    "what did we decide about {a}",
    "how do I fix {a} again",
    "previous notes on {a} and {b}",
    "context for task: {a}; related: {b}",
    "{a} — any gotchas from last time?",
    "summarize what we learned about {a}, especially around {b} and {c}",
)


@dataclass(frozen=True)
class DemoPlan:
    """What was injected, so the demo can tell the reader what to expect.

    Every fault counted here is judged in the window [at - 4h, at) under the
    default settings; nothing outside that window is faulty. With the default
    settings a check at `at` should report:

    - recall_coverage = cold_sessions + late_recalls;
    - observe_coverage = crashed_sessions + ended_without_observe
      + unobserved_compactions (each fault is in a session of its own);
    - observe_failure_rate with failed_observes failed and lost_observes lost
      (above 5%), and circuit_breaker = failure_streak;
    - recall_latency_p95 >= 3000 ms, from slow_recalls recalls above 3000 ms;
    - agent_deviation_contract = deviation_breaches and
      agent_deviation_evidence = deviation_missing_evidence.

    `events` counts distinct event ids; the table holds `events + duplicates`
    rows. `lost_observes` counts requested-role events left without an
    outcome (SPEC's "lost"): each lost worker run leaves two, its
    `memory.observe.requested` and its `observe.started`.
    """

    sessions: int
    events: int
    cold_sessions: int
    late_recalls: int
    crashed_sessions: int
    ended_without_observe: int
    unobserved_compactions: int
    lost_observes: int
    failed_observes: int
    failure_streak: int
    slow_recalls: int
    deviation_breaches: int
    deviation_missing_evidence: int
    duplicates: int


class _Writer(Protocol):
    """The part of `watchdog.store.Store` that `write_demo` needs."""

    def command(self, sql: str) -> Any: ...

    def insert(
        self, table: str, rows: Sequence[Sequence[Any]], column_names: Sequence[str]
    ) -> None: ...


@dataclass(slots=True)
class _Event:
    """One event before it becomes a row; `ts` in epoch milliseconds."""

    id: str
    ts: int
    action: str
    source: str
    component: str
    session_column: str | None
    metadata: dict[str, Any]
    system_id: str | None = None
    level: str = "info"
    success: int = 1
    duration_ms: int | None = None
    error: str = ""
    keep: bool = True  # False when truncated at `at` or removed by a fault


@dataclass(slots=True)
class _Recall:
    """A recall: started/injected are None for the CLI, which logs one event."""

    started: _Event | None
    completed: _Event
    injected: _Event | None


@dataclass(slots=True)
class _ObserveRun:
    """A session's observe request and the worker run that serves it."""

    requested: _Event
    started: _Event
    gates: list[_Event]
    outcome: _Event


@dataclass(slots=True)
class _Session:
    """A real agent session; `healthy` ones are free for fault injection."""

    id: str
    column: str  # what the pi extension writes in the top-level sessionId
    system_id: str
    healthy: bool
    events: list[_Event] = field(default_factory=list)
    recalls: list[_Recall] = field(default_factory=list)
    runs: list[_ObserveRun] = field(default_factory=list)
    end: _Event | None = None


@dataclass(frozen=True)
class _FaultCounts:
    """How many of each fault to inject for a number of sessions."""

    cold: int
    late: int
    crashed: int
    ended_without_observe: int
    unobserved_compactions: int
    lost_runs: int
    breaches_per_kind: int
    missing_evidence: int
    conforming_deviations: int

    @property
    def fault_sessions(self) -> int:
        return (
            self.cold
            + self.late
            + self.crashed
            + self.ended_without_observe
            + self.unobserved_compactions
        )


def _fault_counts(sessions: int) -> _FaultCounts:
    """Fault counts at fixed rates per session, at least one of each."""

    def rate(share: float) -> int:
        return max(1, round(share * sessions))

    return _FaultCounts(
        cold=rate(0.01),
        late=rate(0.006),
        crashed=rate(0.006),
        ended_without_observe=rate(0.008),
        unobserved_compactions=rate(0.006),
        lost_runs=rate(0.006),
        breaches_per_kind=rate(0.002),
        missing_evidence=rate(0.006),
        conforming_deviations=rate(0.08),
    )


class _Builder:
    """Emits events into sessions and the background, from one seeded rng."""

    def __init__(self, rng: random.Random, at_ms: int) -> None:
        self.rng = rng
        # A second stream for the knowledge-retrieval events, seeded from the first
        # without drawing from it: the memory events stay what they were for a seed.
        self.side = random.Random(str(rng.getstate()[1][:8]))
        self.at_ms = at_ms
        self.sessions: list[_Session] = []
        self.background: list[_Event] = []
        self.cli_recalls: list[_Recall] = []

    # -- primitives --------------------------------------------------------

    def new_id(self) -> str:
        """A uuid4-shaped id drawn from the rng, so ids repeat with the seed."""
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def between(self, low: int, high: int) -> int:
        """A uniform integer in [low, high], or low when the range is empty."""
        return self.rng.randint(low, max(low, high))

    def emit(
        self,
        owner: _Session | None,
        ts: int,
        action: str,
        *,
        source: str,
        component: str,
        column: str | None,
        metadata: dict[str, Any],
        system_id: str | None = None,
        duration_ms: int | None = None,
    ) -> _Event:
        """Record one event in its session, or in the background when it has none."""
        event = _Event(
            id=self.new_id(),
            ts=ts,
            action=action,
            source=source,
            component=component,
            session_column=column,
            metadata=metadata,
            system_id=system_id,
            duration_ms=duration_ms,
        )
        (owner.events if owner is not None else self.background).append(event)
        return event

    def pi(
        self, session: _Session, ts: int, action: str, metadata: dict[str, Any], component: str
    ) -> _Event:
        """An event of the pi extension: metadata carries `session_id`, the column often not."""
        return self.emit(
            session,
            ts,
            action,
            source="interactive",
            component=component,
            column=session.column,
            metadata={"session_id": session.id, **metadata},
            system_id=session.system_id,
        )

    def worker(self, session: _Session, ts: int, action: str, metadata: dict[str, Any]) -> _Event:
        """An event of the observe worker: camelCase `sessionId` in metadata, no column."""
        return self.emit(
            session,
            ts,
            action,
            source="worker",
            component="observe",
            column=None,
            metadata={"sessionId": session.id, **metadata},
            system_id="worker-1",
        )

    def query(self) -> str:
        """A recall query of 30 to 200 characters."""
        a, b, c = self.rng.sample(_TOPICS, 3)
        text = self.rng.choice(_QUERY_TEMPLATES).format(a=a, b=b, c=c)
        if len(text) < 30:
            text += f" (see {b})"
        return text[:200]

    def healthy_latency(self) -> float:
        """A recall latency: lognormal around 600 ms, kept under 2.8 s so only faults are slow."""
        while True:
            value = self.rng.lognormvariate(math.log(600), 0.6)
            if 40 <= value < 2_800:
                return round(value, 1)

    def slow_latency(self) -> float:
        """A latency from the tail beyond 3 s."""
        return round(min(SLOW_RECALL_MS + self.rng.lognormvariate(math.log(2_000), 0.7), 20_000), 1)

    # -- session parts -----------------------------------------------------

    def new_session(self, *, healthy: bool = True) -> _Session:
        sid = self.new_id()
        # Older emitters write a placeholder in the column; the id lives in metadata.
        column = sid if self.rng.random() < 0.3 else "interactive"
        system = self.rng.choice(("joel-mbp", "panda", "panda", "clanker"))
        session = _Session(id=sid, column=column, system_id=system, healthy=healthy)
        self.sessions.append(session)
        return session

    def recall(self, session: _Session, ts: int) -> _Recall:
        query = self.query()
        results = 0 if self.rng.random() < 0.15 else self.rng.randint(1, 12)
        injected_count = min(results, self.rng.randint(1, 5)) if results else 0
        latency = self.healthy_latency()
        started = self.pi(session, ts, "memory.recall.started", {"query": query}, "memory-enforcer")
        completed = self.pi(
            session,
            ts + round(latency),
            "memory.recall.completed",
            {
                "query": query,
                "result_count": results,
                "injected_count": injected_count,
                "latency_ms": latency,
            },
            "memory-enforcer",
        )
        injected = None
        if results:
            injected = self.pi(
                session,
                completed.ts + self.between(5, 80),
                "memory.recall.injected",
                {"result_count": results, "injected_count": injected_count},
                "memory-enforcer",
            )
        recall = _Recall(started, completed, injected)
        session.recalls.append(recall)
        return recall

    def knowledge(self, session: _Session, ts: int) -> None:
        """The before_agent_start hook's knowledge retrieval (for config/examples/knowledge.toml).

        About 3% of sessions skip it and 2% of retrievals fail, so the example's
        custom checks have something to find.
        """
        side = self.side
        if side.random() < 0.03:
            return
        started = ts + side.randint(200, 2 * SECOND)
        outcome = "failed" if side.random() < 0.02 else "completed"
        for offset, action in ((0, "started"), (side.randint(150, 900), outcome)):
            session.events.append(
                _Event(
                    id=str(uuid.UUID(int=side.getrandbits(128), version=4)),
                    ts=started + offset,
                    action=f"system_knowledge.retrieval.{action}",
                    source="interactive",
                    component="knowledge",
                    session_column=session.column,
                    metadata={"session_id": session.id},
                    system_id=session.system_id,
                    duration_ms=None,
                )
            )

    def tool_calls(self, session: _Session, start: int, end: int, *, last_at_end: bool) -> None:
        """Tool calls between start and end; sessions whose column has the id often omit it."""
        minutes = max(1, (end - start) // MINUTE)
        count = min(180, max(12, round(minutes * self.rng.uniform(0.4, 2.0))))
        times = sorted(self.between(start, end) for _ in range(count))
        if last_at_end:
            times[-1] = end
        for ts in times:
            tool = self.rng.choice(_TOOLS)
            metadata: dict[str, Any] = {"tool": tool}
            if session.column == "interactive" or self.rng.random() < 0.5:
                metadata = {"session_id": session.id, **metadata}
            failed = self.rng.random() < 0.03
            event = self.emit(
                session,
                ts,
                "tool.call.failed" if failed else "tool.call.completed",
                source="interactive",
                component="tools",
                column=session.column,
                metadata=metadata,
                system_id=session.system_id,
                duration_ms=round(self.rng.lognormvariate(math.log(350), 1.1)),
            )
            if failed:
                event.success, event.level, event.error = 0, "warn", "exit code 1"

    def observe_run(self, session: _Session, ts: int, trigger: str) -> _ObserveRun:
        """Request an observe, then the worker extracts, gates and stores the memories."""
        requested = self.pi(
            session,
            ts,
            "memory.observe.requested",
            {"trigger": trigger, "message_count": self.rng.randint(8, 240)},
            "memory-enforcer",
        )
        started_ts = ts + self.between(1 * SECOND, 20 * SECOND)
        started = self.worker(session, started_ts, "observe.started", {"trigger": trigger})
        gates: list[_Event] = []
        tally, t = dict.fromkeys(_VERDICTS, 0), started_ts
        for _ in range(self.rng.randint(1, 6)):
            t += self.between(300, 4_000)
            verdict = self.rng.choices(_VERDICTS, _VERDICT_WEIGHTS)[0]
            tally[verdict] += 1
            score = round(self.rng.uniform(0.05, 0.99), 2)
            gates.append(
                self.worker(
                    session, t, "memory.gate.decision", {"verdict": verdict, "score": score}
                )
            )
        done = t + self.between(500, 8_000)
        outcome = self.worker(
            session,
            done,
            "observe.store.completed",
            {"trigger": trigger, **tally, "stored": tally["allow"]},
        )
        outcome.duration_ms = done - started_ts
        run = _ObserveRun(requested, started, gates, outcome)
        session.runs.append(run)
        return run

    def session(
        self,
        start: int,
        duration: int,
        *,
        recall_after: int | None = 0,
        compactions: Sequence[int] = (),
        unobserved: Sequence[int] = (),
        ends: bool = True,
        observe_end: bool = True,
        healthy: bool = True,
    ) -> _Session:
        """One session: handle, recall, tool calls, compactions with observes, end and observe.

        `recall_after` is the recall's delay after the first event (0: a
        few seconds, as a healthy session does; None: a cold start).
        `compactions` are absolute times, those also in `unobserved` get no
        observe. A session that does not end stops with its last tool call
        at start + duration.
        """
        session = self.new_session(healthy=healthy)
        end = start + duration
        handle = f"{self.rng.choice(_HANDLE_WORDS)}-{self.rng.randint(10, 99)}"
        self.pi(session, start, "session.handle.generated", {"handle": handle}, "session")
        self.knowledge(session, start)
        if recall_after is not None:
            self.recall(session, start + (recall_after or self.between(300, 4 * SECOND)))
        # Tool calls begin once a recall (even a slow one) has returned.
        tools_end = end if not ends else end - 2 * SECOND
        self.tool_calls(session, start + 25 * SECOND, tools_end, last_at_end=not ends)
        for ts in compactions:
            tokens = self.rng.randint(90_000, 190_000)
            self.pi(session, ts, "compaction.before", {"tokens_before": tokens}, "compaction")
            if ts not in unobserved:
                self.observe_run(
                    session, ts + self.between(20 * SECOND, 110 * SECOND), "compaction"
                )
        if ends:
            action = "session.ended" if self.rng.random() < 0.7 else "session.shutdown"
            reason = self.rng.choice(("user_exit", "idle", "sigterm"))
            session.end = self.pi(session, end, action, {"reason": reason}, "session")
            if observe_end:
                self.observe_run(session, end + self.between(50, 3 * SECOND), "session_shutdown")
        return session

    # -- the whole --------------------------------------------------------

    def all_events(self) -> Iterable[_Event]:
        for session in self.sessions:
            yield from session.events
        yield from self.background

    def truncate(self) -> None:
        """Drop what would happen at or after `at`: those sessions are still running."""
        for event in self.all_events():
            if event.ts >= self.at_ms:
                event.keep = False

    def kept_events(self) -> list[_Event]:
        return sorted((e for e in self.all_events() if e.keep), key=lambda e: (e.ts, e.id))

    def window_start(self) -> int:
        return self.at_ms - WINDOW_MS


# -- the healthy base ------------------------------------------------------


def _healthy_duration(rng: random.Random) -> int:
    """Most sessions are short: 5 to 90 minutes, around 25."""
    minutes = min(90.0, max(5.0, rng.lognormvariate(math.log(25), 0.7)))
    return round(minutes * MINUTE)


def _compaction_times(rng: random.Random, start: int, duration: int) -> list[int]:
    """Evenly spread compactions, one per ~30 minutes, at least 10 minutes before the end."""
    count = int(duration // (30 * MINUTE))
    spacing = duration // (count + 1)
    times = [start + (k + 1) * spacing + rng.randint(-3 * MINUTE, 3 * MINUTE) for k in range(count)]
    return [t for t in times if t <= start + duration - 10 * MINUTE]


def _build_healthy_sessions(builder: _Builder, count: int) -> None:
    """Sessions all over the 24 hours; those still running at `at` are cut off there."""
    rng, at = builder.rng, builder.at_ms
    for _ in range(count):
        start = rng.randint(at - LOOKBACK_MS + MINUTE, at - 3 * MINUTE)
        duration = _healthy_duration(rng)
        builder.session(start, duration, compactions=_compaction_times(rng, start, duration))


def _build_background(builder: _Builder, sessions: int) -> None:
    """Sessionless traffic: gateway heartbeats, webhooks, CLI commands and CLI recalls."""
    rng, at = builder.rng, builder.at_ms
    t = at - LOOKBACK_MS + rng.randint(0, 5 * MINUTE)
    while t < at:
        metadata = {"queue_depth": rng.randint(0, 4), "uptime_s": (t - at + LOOKBACK_MS) // SECOND}
        builder.emit(
            None,
            t,
            "gateway.heartbeat",
            source="gateway",
            component="gateway",
            column="gateway",
            metadata=metadata,
            system_id="panda",
        )
        t += 5 * MINUTE + rng.randint(-20 * SECOND, 20 * SECOND)
    for _ in range(sessions // 5):
        provider = rng.choice(("github", "vercel", "front", "mux"))
        builder.emit(
            None,
            rng.randint(at - LOOKBACK_MS, at - 1),
            "webhook.received",
            source="gateway",
            component="webhooks",
            column="unknown",
            metadata={"provider": provider},
            system_id="panda",
        )
    for _ in range(sessions // 10):
        command = rng.choice(("joelclaw status", "joelclaw logs", "joelclaw otel search"))
        builder.emit(
            None,
            rng.randint(at - LOOKBACK_MS, at - 1),
            "cli.command",
            source="cli",
            component="cli",
            column="interactive",
            metadata={"command": command},
            system_id="joel-mbp",
        )
    for _ in range(sessions // 8):
        _cli_recall(builder, rng.randint(at - LOOKBACK_MS, at - 1))


def _cli_recall(builder: _Builder, ts: int) -> None:
    """A recall from the CLI: one event, latency in the duration_ms column, no session."""
    results = builder.rng.randint(0, 10)
    event = builder.emit(
        None,
        ts,
        "memory.recall.completed",
        source="cli",
        component="recall-cli",
        column="interactive",
        metadata={"query": builder.query(), "result_count": results},
        system_id="joel-mbp",
        duration_ms=round(builder.healthy_latency()),
    )
    builder.cli_recalls.append(_Recall(None, event, None))


# -- faulty sessions, all judged in the last 4 hours -------------------------


def _build_fault_sessions(builder: _Builder, counts: _FaultCounts) -> None:
    """Sessions whose start, end or compaction obligation is due in the window and unmet."""
    rng, at, w0 = builder.rng, builder.at_ms, builder.window_start()
    for _ in range(counts.cold):
        # Deadline first_seen + 5m lands in the window.
        start = rng.randint(w0 + 2 * MINUTE, at - 45 * MINUTE)
        builder.session(start, rng.randint(10, 40) * MINUTE, recall_after=None, healthy=False)
    for _ in range(counts.late):
        start = rng.randint(w0 + 2 * MINUTE, at - 45 * MINUTE)
        late = rng.randint(6 * MINUTE + 10 * SECOND, 9 * MINUTE + 50 * SECOND)
        builder.session(start, rng.randint(15, 40) * MINUTE, recall_after=late, healthy=False)
    for _ in range(counts.crashed):
        # A silent end is judged at last_seen + 6h: put that inside the window.
        last = rng.randint(
            at - WINDOW_MS - IDLE_TIMEOUT_MS + 10 * MINUTE, at - IDLE_TIMEOUT_MS - 10 * MINUTE
        )
        duration = rng.randint(10, 60) * MINUTE
        builder.session(last - duration, duration, ends=False, healthy=False)
    for _ in range(counts.ended_without_observe):
        end = rng.randint(w0 + 5 * MINUTE, at - 20 * MINUTE)
        duration = rng.randint(10, 50) * MINUTE
        builder.session(end - duration, duration, observe_end=False, healthy=False)
    for _ in range(counts.unobserved_compactions):
        # The session's only compaction, far from its end observe, so nothing else covers it.
        compaction = rng.randint(w0 + 10 * MINUTE, at - 90 * MINUTE)
        start = compaction - rng.randint(10, 30) * MINUTE
        end = compaction + rng.randint(25, 50) * MINUTE
        builder.session(
            start, end - start, compactions=[compaction], unobserved=[compaction], healthy=False
        )


def _other_outcome_near(session: _Session, run: _ObserveRun) -> bool:
    """Whether another outcome of the session would answer this run's requests."""
    low, high = run.requested.ts, run.started.ts + OBSERVE_GRACE_MS
    return any(
        other is not run and other.outcome.keep and low <= other.outcome.ts <= high
        for other in session.runs
    )


def _inject_lost_observes(builder: _Builder, runs: int) -> int:
    """Kill worker runs after `observe.started`; returns the requested-role events left lost."""
    w0, at = builder.window_start(), builder.at_ms
    candidates = [
        (session, run)
        for session in builder.sessions
        if session.healthy
        for run in session.runs
        if w0 <= run.requested.ts <= at - OBSERVE_GRACE_MS - MINUTE and run.outcome.keep
    ]
    candidates = [(s, r) for s, r in candidates if not _other_outcome_near(s, r)]
    if len(candidates) < runs:
        raise RuntimeError("too few observe runs in the window to lose some")
    for session, run in builder.rng.sample(candidates, runs):
        session.healthy = False  # keep its other events out of later faults
        run.outcome.keep = False
        for gate in run.gates:
            gate.keep = False
    return 2 * runs


def _outcomes(builder: _Builder, low: int, high: int) -> list[_Event]:
    """Recall and observe outcome events in [low, high), in the circuit breaker's order."""
    found = [
        recall.completed
        for recall in _all_recalls(builder)
        if recall.completed.keep and low <= recall.completed.ts < high
    ]
    found += [
        run.outcome
        for session in builder.sessions
        for run in session.runs
        if run.outcome.keep and low <= run.outcome.ts < high
    ]
    found += [
        event
        for session in builder.sessions
        for event in session.events
        if event.action == "observe.store.failed" and event.keep and low <= event.ts < high
    ]
    return sorted({e.id: e for e in found}.values(), key=lambda e: (e.ts, e.id))


def _all_recalls(builder: _Builder) -> list[_Recall]:
    return [r for s in builder.sessions for r in s.recalls] + builder.cli_recalls


def _fail(builder: _Builder, event: _Event, attempt: int) -> None:
    """Turn an observe outcome into a store failure."""
    template = builder.rng.choice(_STORE_ERRORS)
    event.action = "observe.store.failed"
    event.success, event.level = 0, "error"
    event.error = template.format(n=builder.rng.randint(1000, 9999))
    event.metadata = {
        "sessionId": event.metadata["sessionId"],
        "trigger": event.metadata["trigger"],
        "attempt": attempt,
    }


def _inject_failure_streak(builder: _Builder) -> tuple[int, int]:
    """A session whose shutdown observe fails five times in a row; returns the reserved span.

    The retries go into the widest gap between outcome events in the middle
    of the window, so no other outcome breaks or lengthens the run.
    """
    at = builder.at_ms
    outcomes = _outcomes(builder, at - 3 * HOUR - 30 * MINUTE, at - 30 * MINUTE)
    gaps = [(b.ts - a.ts, a.ts) for a, b in itertools.pairwise(outcomes)]
    if not gaps:
        raise RuntimeError("no outcome events in the window to place a failure streak")
    width, low = max(gaps, key=lambda gap: (gap[0], -gap[1]))
    span = min(width, 8 * MINUTE)  # retries within the observe grace
    if span < 32:
        raise RuntimeError("no room between outcome events for a failure streak")
    step = span // 16
    end = low + step
    duration = builder.rng.randint(15, 45) * MINUTE
    session = builder.session(end - duration, duration, observe_end=False, healthy=False)
    requested = builder.pi(
        session,
        low + 2 * step,
        "memory.observe.requested",
        {"trigger": "session_shutdown", "message_count": builder.rng.randint(8, 240)},
        "memory-enforcer",
    )
    for attempt in range(FAILURE_STREAK):
        started = builder.worker(
            session,
            low + (3 + 2 * attempt) * step,
            "observe.started",
            {"trigger": "session_shutdown", "attempt": attempt + 1},
        )
        failed = builder.worker(
            session,
            low + (4 + 2 * attempt) * step,
            "observe.store.completed",
            {"trigger": "session_shutdown"},
        )
        _fail(builder, failed, attempt + 1)
        session.runs.append(_ObserveRun(requested, started, [], failed))
    return low, low + span


def _slow_needed(recalls_in_window: int) -> int:
    """Slow recalls that put the nearest-rank p95 at or above 3 s, with a margin."""
    at_p95_or_above = recalls_in_window - math.ceil(0.95 * recalls_in_window) + 1
    return at_p95_or_above + max(1, math.ceil(0.02 * recalls_in_window))


def _make_slow(builder: _Builder, recall: _Recall) -> None:
    """Give a recall a latency beyond 3 s, moving its completion (and injection) later."""
    latency = builder.slow_latency()
    completed = recall.completed
    completed.level = "warn"
    if recall.started is None:
        completed.duration_ms = round(latency)
        return
    completed.ts = recall.started.ts + round(latency)
    completed.metadata["latency_ms"] = latency
    if recall.injected is not None:
        recall.injected.ts = completed.ts + builder.between(5, 80)


def _inject_slow_recalls(builder: _Builder, reserved: tuple[int, int]) -> int:
    """Make enough recalls completing in the window slow that their p95 is >= 3 s."""
    w0, at = builder.window_start(), builder.at_ms
    in_window = [r for r in _all_recalls(builder) if r.completed.keep and w0 <= r.completed.ts < at]
    needed = _slow_needed(len(in_window))
    # A moved completion must stay in the window and out of the failure streak's span.
    candidates = [
        r
        for r in in_window
        if (r.started is None or w0 <= r.started.ts <= at - 30 * SECOND)
        and not (r.started is not None and reserved[0] - 30 * SECOND <= r.started.ts <= reserved[1])
    ]
    if len(candidates) < needed:
        raise RuntimeError("too few recalls in the window to make the p95 slow")
    for recall in builder.rng.sample(candidates, needed):
        _make_slow(builder, recall)
    return needed


def _inject_failed_observes(builder: _Builder, lost: int) -> int:
    """Fail single observe outcomes in the window until the failure rate is about 10%.

    No two failures are neighbours in outcome order, so the streak stays the
    longest run. Returns all failed observes, the streak's included.
    """
    w0, at = builder.window_start(), builder.at_ms
    outcomes = _outcomes(builder, w0, at)
    observes = [e for e in outcomes if e.source == "worker"]
    failed = {e.id for e in observes if e.action == "observe.store.failed"}
    target = math.ceil(TARGET_OBSERVE_FAILURE_RATE * (len(observes) + lost)) - lost
    needed = max(FAILURE_STREAK + 2, target) - len(failed)
    candidates = [
        i
        for i, e in enumerate(outcomes)
        if e.action == "observe.store.completed" and w0 + MINUTE <= e.ts < at - MINUTE
    ]
    builder.rng.shuffle(candidates)
    picked = 0
    for i in candidates:
        if picked == needed:
            break
        neighbours = outcomes[max(0, i - 1) : i + 2]
        if any(n.id in failed for n in neighbours):
            continue
        _fail(builder, outcomes[i], 1)
        failed.add(outcomes[i].id)
        picked += 1
    if picked < needed:
        raise RuntimeError("too few observe outcomes in the window to fail some")
    return len(failed)


# -- agent deviations ------------------------------------------------------


def _deviation_slot(
    builder: _Builder, session: _Session, low: int, high: int, min_prior: int
) -> tuple[int, list[str]] | None:
    """A time inside the session (before its end) in [low, high), and the ids before it."""
    end_ts = session.end.ts if session.end is not None and session.end.keep else None
    events = sorted((e for e in session.events if e.keep), key=lambda e: (e.ts, e.id))
    if end_ts is not None:
        events = [e for e in events if e.ts < end_ts]
    # A strictly later neighbour keeps the deviation inside the session and after its evidence.
    indexes = [
        i
        for i in range(min_prior - 1, len(events) - 1)
        if low <= events[i].ts < high and events[i + 1].ts > events[i].ts
    ]
    if not indexes:
        return None
    i = builder.rng.choice(indexes)
    ts = events[i].ts + max(1, (events[i + 1].ts - events[i].ts) // 2)
    return ts, [e.id for e in events[: i + 1]]


def _deviation_payload(
    builder: _Builder, session: _Session, prior: list[str], kind: str
) -> dict[str, Any]:
    """The deviation metadata; `kind` says how (or whether) it breaks the contract."""
    rng = builder.rng
    evidence = rng.sample(prior, min(len(prior), rng.randint(1, 5)))
    payload: dict[str, Any] = {
        "session_id": session.id,
        "agente": rng.choice(_AGENTS),
        "tipo": rng.choice(_DEVIATION_TYPES),
        "evidenceEventIds": evidence,
    }
    if kind == "extra_key":
        # Free text is what the allow list exists to keep out: it can carry personal data.
        payload["nota"] = "usuário pediu para ligar para maria.souza@example.com amanhã"
    elif kind == "unknown_tipo":
        payload["tipo"] = "abandono"
    elif kind == "too_many_ids":
        payload["evidenceEventIds"] = rng.sample(prior, 21)
    elif kind == "duplicate_ids":
        payload["evidenceEventIds"] = [*evidence, evidence[0]]
    elif kind == "missing_evidence":
        payload["evidenceEventIds"] = [*evidence, builder.new_id()]
    return payload


def _place_deviation(
    builder: _Builder, pool: list[_Session], kind: str, low: int, high: int
) -> bool:
    """Add one deviation event of `kind` to a free session of the pool."""
    min_prior = 21 if kind == "too_many_ids" else 2
    for index, session in enumerate(pool):
        slot = _deviation_slot(builder, session, low, high, min_prior)
        if slot is None:
            continue
        ts, prior = slot
        payload = _deviation_payload(builder, session, prior, kind)
        builder.emit(
            session,
            ts,
            "anamnese.agent_deviation",
            source="interactive",
            component="anamnese",
            column=session.column,
            metadata=payload,
            system_id=session.system_id,
        )
        pool.pop(index)
        return True
    return False


def _inject_deviations(builder: _Builder, counts: _FaultCounts) -> None:
    """Conforming deviation events over the day, and faulty ones in the window."""
    w0, at = builder.window_start(), builder.at_ms
    pool = [s for s in builder.sessions if s.healthy]
    builder.rng.shuffle(pool)
    faulty = [kind for kind in _BREACH_KINDS for _ in range(counts.breaches_per_kind)]
    faulty += ["missing_evidence"] * counts.missing_evidence
    for kind in faulty:
        if not _place_deviation(builder, pool, kind, w0 + MINUTE, at - MINUTE):
            raise RuntimeError(f"no session in the window can carry a {kind} deviation")
    for _ in range(counts.conforming_deviations):
        _place_deviation(builder, pool, "conforming", at - LOOKBACK_MS, at)


# -- rows ------------------------------------------------------------------


def _to_ms(moment: datetime) -> int:
    """Epoch milliseconds, rounded down; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _from_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _row(event: _Event, received_ms: int) -> list[Any]:
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


def _rows(events: list[_Event], rng: random.Random, at_ms: int) -> tuple[list[list[Any]], int]:
    """Rows in time order, with ~1% re-written later (same id and timestamp) as outbox retries do."""
    old_enough = [i for i, e in enumerate(events) if e.ts < at_ms - 20 * MINUTE]
    retried = set(rng.sample(old_enough, min(len(old_enough), round(0.01 * len(events)))))
    rows: list[list[Any]] = []
    for i, event in enumerate(events):
        received = min(event.ts + rng.randint(20, 1_500), at_ms - 1)
        rows.append(_row(event, received))
        if i in retried:
            rows.append(_row(event, received + rng.randint(SECOND, 10 * MINUTE)))
    return rows, len(retried)


def generate_rows(
    *, sessions: int = 500, seed: int = 0, at: datetime
) -> tuple[list[list[Any]], DemoPlan]:
    """Demo telemetry for the 24 hours before `at`, as rows in JOELCLAW_COLUMNS order.

    The same seed, sessions and `at` give the same rows. Every timestamp is
    before `at` and within 24 hours of it; timestamps are aware UTC
    datetimes with millisecond precision.
    """
    if sessions < MIN_SESSIONS:
        raise ValueError(f"the demo needs at least {MIN_SESSIONS} sessions, got {sessions}")
    builder = _Builder(random.Random(seed), _to_ms(at))
    counts = _fault_counts(sessions)
    _build_fault_sessions(builder, counts)
    # One session is kept back for the failure streak, placed once the rest exists.
    _build_healthy_sessions(builder, sessions - counts.fault_sessions - 1)
    _build_background(builder, sessions)
    builder.truncate()
    lost = _inject_lost_observes(builder, counts.lost_runs)
    reserved = _inject_failure_streak(builder)
    slow = _inject_slow_recalls(builder, reserved)
    failed = _inject_failed_observes(builder, lost)
    _inject_deviations(builder, counts)
    events = builder.kept_events()
    rows, duplicates = _rows(events, builder.rng, builder.at_ms)
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
        deviation_breaches=counts.breaches_per_kind * len(_BREACH_KINDS),
        deviation_missing_evidence=counts.missing_evidence,
        duplicates=duplicates,
    )
    return rows, plan


def write_demo(
    store: _Writer, table: str, *, sessions: int = 500, seed: int = 0, at: datetime
) -> DemoPlan:
    """Create `table` (and its database) in the joelclaw layout and fill it with demo telemetry.

    Rows are appended: a table that already holds demo rows for another `at`
    will mix both, so the demo command should start from a fresh store.
    """
    database, _, name = table.rpartition(".")
    for part in (database, name) if database else (name,):
        if not _IDENTIFIER.match(part):
            raise ValueError(f"not a plain table name: {table!r}")
    rows, plan = generate_rows(sessions=sessions, seed=seed, at=at)
    if database:
        store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    store.command(create_table_sql("joelclaw", table))
    for offset in range(0, len(rows), INSERT_BATCH):
        store.insert(table, rows[offset : offset + INSERT_BATCH], JOELCLAW_COLUMNS)
    return plan
