"""The demo's vocabulary: its constants, what it injects (`DemoPlan`) and the event records.

Its rows have the columns of the joelclaw preset's table (`JOELCLAW_COLUMNS`;
docs/spec.md#2-data-sources-presets-the-normalized-event).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

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

# The watchdog's defaults (docs/spec.md section 4): faults are placed against them.
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

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

AGENTS = ("po", "arquiteto", "dev")
DEVIATION_TYPES = ("laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario")
BREACH_KINDS = ("extra_key", "unknown_tipo", "too_many_ids", "duplicate_ids")
TOOLS = ("bash", "read", "edit", "write", "grep", "glob", "web_fetch", "todo_write")
HANDLE_WORDS = ("bright-otter", "calm-heron", "swift-lynx", "quiet-fox", "amber-owl", "bold-yak")
# A human message's `kind`: None leaves the field out (SPEC: a missing kind is non-trivial).
QUESTION_KINDS = ("question", "question", "task", "task", None)
TRIVIAL_KINDS = ("greeting", "ack")
TRIVIAL_SHARE = 0.2
CHANNELS = ("tui", "tui", "slack", "telegram")
VERDICTS = ("allow", "hold", "discard")
# Discard well below the 0.7 drift target: the write gate is healthy in the demo.
VERDICT_WEIGHTS = (0.62, 0.24, 0.14)
STORE_ERRORS = (
    "store timeout after 30s for id {n}",
    "qdrant upsert failed: 503 Service Unavailable (id {n})",
    "embedding request failed: connection reset by peer (batch {n})",
)
TOPICS = (
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
QUERY_TEMPLATES = (
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
      agent_deviation_evidence = deviation_missing_evidence;
    - recall_before_response = answered_without_recall (human messages
      answered with no recall between the message and the reply, or with the
      recall only after it).

    `events` counts distinct event ids; `duplicates` memory events are
    written again by a later insert (outbox retries), so the table holds
    `events + duplicates` rows until they are merged, and a check counts
    them in `data_quality.duplicate_rows` (see `write_demo`). `lost_observes`
    counts requested-role events left without an outcome ("lost" in
    docs/spec.md section 4): each lost worker run leaves two, its
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
    answered_without_recall: int
    duplicates: int

    def injected(self) -> str:
        """`Injected: …`: every fault, counted, in one line (the same whichever way the demo's
        telemetry is stored; how its duplicates came is said apart)."""
        return (
            f"Injected: {self.cold_sessions} cold sessions, {self.late_recalls} late recalls,"
            f" {self.crashed_sessions} crashed sessions,"
            f" {self.ended_without_observe} ended without observe,"
            f" {self.unobserved_compactions} unobserved compactions, {self.lost_observes} lost and"
            f" {self.failed_observes} failed observes, a failure streak of {self.failure_streak},"
            f" {self.slow_recalls} slow recalls, {self.deviation_breaches} deviation contract"
            f" breaches, {self.deviation_missing_evidence} deviations citing missing ids,"
            f" {self.answered_without_recall} questions answered without recall,"
            f" {self.duplicates} duplicate rows (data_quality.duplicate_rows)."
        )


class Writer(Protocol):
    """The part of `watchdog.store.Store` that `write_demo` needs."""

    def command(self, sql: str) -> Any: ...

    def insert(
        self, table: str, rows: Sequence[Sequence[Any]], column_names: Sequence[str]
    ) -> None: ...


@dataclass(slots=True)
class Event:
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
class Recall:
    """A recall: started/injected are None for the CLI, which logs one event."""

    started: Event | None
    completed: Event
    injected: Event | None


@dataclass(slots=True)
class ObserveRun:
    """A session's observe request and the worker run that serves it."""

    requested: Event
    started: Event
    gates: list[Event]
    outcome: Event


@dataclass(slots=True)
class Turn:
    """A human message and the agent's reply; `recall` is None for a trivial message."""

    message: Event
    recall: Recall | None
    reply: Event


@dataclass(slots=True)
class Session:
    """A real agent session; `healthy` ones are free for fault injection."""

    id: str
    column: str  # what the pi extension writes in the top-level sessionId
    system_id: str
    healthy: bool
    events: list[Event] = field(default_factory=list)
    recalls: list[Recall] = field(default_factory=list)
    runs: list[ObserveRun] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    end: Event | None = None
    faults: list[str] = field(default_factory=list)  # what was injected into it (FAULTS)


# The faults a session can be given, each named in its session's `faults`; `explain` on the
# session names it (tests/test_explain.py).
FAULTS = (
    "cold start",
    "late recall",
    "silent end without observe",
    "end without observe",
    "answer without recall",
    "compaction without observe",
    "lost observe",
    "failure streak",
    "slow recall",
    "failed observe",
    *(f"deviation {kind}" for kind in BREACH_KINDS),
    "deviation missing_evidence",
)


@dataclass(frozen=True)
class FaultCounts:
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
    answered_without_recall: int

    @property
    def fault_sessions(self) -> int:
        return (
            self.cold
            + self.late
            + self.crashed
            + self.ended_without_observe
            + self.unobserved_compactions
            + self.answered_without_recall
        )


def fault_counts(sessions: int) -> FaultCounts:
    """Fault counts at fixed rates per session, at least one of each."""

    def rate(share: float) -> int:
        return max(1, round(share * sessions))

    return FaultCounts(
        cold=rate(0.01),
        late=rate(0.006),
        crashed=rate(0.006),
        ended_without_observe=rate(0.008),
        unobserved_compactions=rate(0.006),
        lost_runs=rate(0.006),
        breaches_per_kind=rate(0.002),
        missing_evidence=rate(0.006),
        conforming_deviations=rate(0.08),
        answered_without_recall=rate(0.012),
    )
