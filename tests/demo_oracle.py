"""A small reference evaluator of docs/spec.md sections 3-5 (joelclaw preset, default
settings), over the demo's rows read back: what tests/test_demo_data.py checks the plan against,
rather than the generator's own bookkeeping."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from watchdog.demo.model import JOELCLAW_COLUMNS

AT = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
WINDOW = timedelta(hours=4)
LOOKBACK = timedelta(hours=24)
RECALL_GRACE = timedelta(minutes=5)
OBSERVE_GRACE = timedelta(minutes=15)
IDLE_TIMEOUT = timedelta(hours=6)

PLACEHOLDERS = {"", "interactive", "gateway", "unknown"}
SESSION_END = {"session.ended", "session.shutdown"}
COMPACTION = {"session.compacted", "compaction.before"}
RECALL_STARTED = {"memory.recall.started"}
RECALL_OUTCOME = {"memory.recall.completed", "memory.recall.failed"}
RECALL = RECALL_STARTED | RECALL_OUTCOME
OBSERVE_REQUESTED = {"memory.observe.requested", "memory.observe.started", "observe.started"}
OBSERVE_COMPLETED = {"memory.observe.completed", "observe.store.completed"}
OBSERVE_FAILED = {"memory.observe.failed", "observe.store.failed"}
OBSERVE_OUTCOME = OBSERVE_COMPLETED | OBSERVE_FAILED
OBSERVE = OBSERVE_REQUESTED | OBSERVE_OUTCOME
FAILED = {"memory.recall.failed"} | OBSERVE_FAILED
HUMAN_MESSAGE = {"message.received", "gateway.message.received"}
AGENT_RESPONSE = {"message.sent", "gateway.message.sent", "agent.response"}
TRIVIAL = {"greeting", "ack", "heartbeat"}
DEVIATION_KEYS = {"agente", "tipo", "evidenceEventIds"}
ENVELOPE_KEYS = {"session.id", "session_id", "sessionId", "event.name", "event.id"}
DEVIATION_TYPES = {"laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario"}


@dataclass(frozen=True)
class Event:
    """A normalized event (docs/spec.md section 2) of the joelclaw preset."""

    id: str
    ts: datetime
    session: str
    name: str
    latency: float | None
    result_count: int | None
    payload: dict[str, Any]


def normalize(rows: Iterable[list[Any]]) -> list[Event]:
    """Each id once (the latest received), session from metadata then the column."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        record = dict(zip(JOELCLAW_COLUMNS, row, strict=True))
        seen = latest.get(record["id"])
        if seen is None or record["received_at"] > seen["received_at"]:
            latest[record["id"]] = record
    events = []
    for record in latest.values():
        meta = json.loads(record["metadata_json"])
        candidates = (meta.get("session_id"), meta.get("sessionId"), record["sessionId"])
        session = next((s for s in candidates if s), "")
        latency = meta.get("latency_ms", record["duration_ms"])
        events.append(
            Event(
                id=record["id"],
                ts=record["timestamp"],
                session="" if session in PLACEHOLDERS else session,
                name=record["action"],
                latency=None if latency is None else float(latency),
                result_count=meta.get("result_count"),
                payload=meta,
            )
        )
    return sorted(events, key=lambda e: (e.ts, e.id))


@dataclass
class Verdict:
    """What the checks of docs/spec.md section 5 would find in one window."""

    recall_unmet: set[str] = field(default_factory=set)
    observe_unmet: set[str] = field(default_factory=set)
    silent_unmet: int = 0
    end_unmet: int = 0
    compaction_unmet: int = 0
    observe_completed: int = 0
    observe_failed: int = 0
    observe_lost: int = 0
    recall_lost: int = 0
    p95: float | None = None
    slow: int = 0
    longest_failed_run: int = 0
    injection_unmet: set[str] = field(default_factory=set)
    discard_share: float | None = None
    deviation_breaches: int = 0
    deviation_missing: int = 0
    deviations: int = 0
    answered_without_recall: list[tuple[datetime, str]] = field(default_factory=list)
    questions_due: int = 0
    trivial_messages: int = 0

    @property
    def observe_failure_rate(self) -> float:
        lost_or_failed = self.observe_failed + self.observe_lost
        return lost_or_failed / (self.observe_completed + lost_or_failed)


def _any(events: list[Event], names: set[str], low: datetime, high: datetime) -> bool:
    return any(e.name in names and low <= e.ts <= high for e in events)


def _judge_sessions(events: list[Event], start: datetime, at: datetime, out: Verdict) -> None:
    """The coverage, outcome and injection obligations due in [start, at)."""
    by_session: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.session:
            by_session[event.session].append(event)

    def unmet(deadline: datetime, evs: list[Event], names: set[str], low: datetime) -> bool:
        """Due in the window, and no event of `names` in [low, deadline]."""
        return start <= deadline < at and not _any(evs, names, low, deadline)

    minute = timedelta(minutes=1)
    for sid, evs in by_session.items():
        first, last = evs[0].ts, evs[-1].ts
        if unmet(first + RECALL_GRACE, evs, RECALL, first):
            out.recall_unmet.add(sid)
        end = next((e.ts for e in evs if e.name in SESSION_END), None)
        if end is not None and unmet(end + OBSERVE_GRACE, evs, OBSERVE, end - 5 * minute):
            out.observe_unmet.add(sid)
            out.end_unmet += 1
        # A silent end is met by an observe in [last - 5m, last], judged 6h later.
        silent = start <= last + IDLE_TIMEOUT < at and not _any(
            evs, OBSERVE, last - 5 * minute, last
        )
        if end is None and silent:
            out.observe_unmet.add(sid)
            out.silent_unmet += 1
        for e in evs:
            if e.name in COMPACTION and unmet(e.ts + OBSERVE_GRACE, evs, OBSERVE, e.ts - minute):
                out.observe_unmet.add(sid)
                out.compaction_unmet += 1
            if e.name in RECALL_STARTED:
                out.recall_lost += unmet(e.ts + RECALL_GRACE, evs, RECALL_OUTCOME, e.ts)
            if e.name in OBSERVE_REQUESTED:
                out.observe_lost += unmet(e.ts + OBSERVE_GRACE, evs, OBSERVE_OUTCOME, e.ts)
            injectable = e.name == "memory.recall.completed" and (e.result_count or 0) > 0
            if injectable and unmet(e.ts + RECALL_GRACE, evs, {"memory.recall.injected"}, e.ts):
                out.injection_unmet.add(sid)
            if e.name in HUMAN_MESSAGE:
                _judge_message(e, evs, start, at, out)


def _judge_message(
    message: Event, evs: list[Event], start: datetime, at: datetime, out: Verdict
) -> None:
    """Recall before response: a recall in [message, the first reply after it or the grace]."""
    if message.payload.get("kind") in TRIVIAL:
        out.trivial_messages += 1
        return
    replies = [e.ts for e in evs if e.name in AGENT_RESPONSE and e.ts > message.ts]
    deadline = min([message.ts + RECALL_GRACE, *replies])
    if start <= deadline < at:
        out.questions_due += 1
        if not _any(evs, RECALL, message.ts, deadline):
            out.answered_without_recall.append((message.ts, message.id))


def _longest_run(outcomes: list[Event]) -> int:
    longest = current = 0
    for event in outcomes:
        current = current + 1 if event.name in FAILED else 0
        longest = max(longest, current)
    return longest


def _breaks_contract(payload: dict[str, Any]) -> bool:
    if set(payload) - DEVIATION_KEYS - ENVELOPE_KEYS:
        return True
    agente, ids = payload.get("agente"), payload.get("evidenceEventIds")
    if not isinstance(agente, str) or not agente or payload.get("tipo") not in DEVIATION_TYPES:
        return True
    if isinstance(ids, str):
        ids = json.loads(ids)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return True
    return len(ids) != len(set(ids)) or len(ids) > 20


def evaluate(events: list[Event], at: datetime) -> Verdict:
    """The default-settings checks at `at` over the window [at - 4h, at)."""
    start = at - WINDOW
    visible = [e for e in events if at - LOOKBACK <= e.ts < at]
    in_window = [e for e in visible if e.ts >= start]
    out = Verdict()
    _judge_sessions(visible, start, at, out)
    out.observe_completed = sum(e.name in OBSERVE_COMPLETED for e in in_window)
    out.observe_failed = sum(e.name in OBSERVE_FAILED for e in in_window)
    latencies = sorted(
        e.latency for e in in_window if e.name == "memory.recall.completed" and e.latency
    )
    if latencies:
        out.p95 = latencies[math.ceil(0.95 * len(latencies)) - 1]
    out.slow = sum(latency > 3000 for latency in latencies)
    out.longest_failed_run = _longest_run(
        [e for e in in_window if e.name in RECALL_OUTCOME | OBSERVE_OUTCOME]
    )
    verdicts = [e.payload["verdict"] for e in in_window if e.name == "memory.gate.decision"]
    out.discard_share = verdicts.count("discard") / len(verdicts) if verdicts else None
    known = {e.id for e in visible}
    for e in in_window:
        if e.name != "anamnese.agent_deviation":
            continue
        out.deviations += 1
        if _breaks_contract(e.payload):
            out.deviation_breaches += 1
        elif any(i not in known for i in e.payload["evidenceEventIds"]):
            out.deviation_missing += 1
    return out
