"""The faults the demo injects, each judged in the window before `at` (see `DemoPlan`).

A new built-in check gets a fault here when the demo should show it, and `tests/test_demo_data.py`
re-derives each count (docs/development.md#adding-a-built-in-check).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from watchdog.demo.builder import (
    Builder,
)
from watchdog.demo.model import (
    AGENTS,
    BREACH_KINDS,
    DEVIATION_TYPES,
    FAILURE_STREAK,
    HOUR,
    IDLE_TIMEOUT_MS,
    LOOKBACK_MS,
    MINUTE,
    OBSERVE_GRACE_MS,
    SECOND,
    STORE_ERRORS,
    TARGET_OBSERVE_FAILURE_RATE,
    WINDOW_MS,
    Event,
    FaultCounts,
    ObserveRun,
    Recall,
    Session,
)


def build_fault_sessions(builder: Builder, counts: FaultCounts) -> None:
    """Sessions whose start, end, compaction or response obligation is due in the window and unmet."""
    rng, at, w0 = builder.rng, builder.at_ms, builder.window_start()
    for _ in range(counts.cold):
        # Deadline first_seen + 5m lands in the window.
        start = rng.randint(w0 + 2 * MINUTE, at - 45 * MINUTE)
        cold = builder.session(
            start, rng.randint(10, 40) * MINUTE, recall_after=None, healthy=False
        )
        cold.faults.append("cold start")
    for _ in range(counts.late):
        start = rng.randint(w0 + 2 * MINUTE, at - 45 * MINUTE)
        late = rng.randint(6 * MINUTE + 10 * SECOND, 9 * MINUTE + 50 * SECOND)
        session = builder.session(
            start, rng.randint(15, 40) * MINUTE, recall_after=late, healthy=False
        )
        session.faults.append("late recall")
    for _ in range(counts.crashed):
        # A silent end is judged at last_seen + 6h: put that inside the window.
        last = rng.randint(
            at - WINDOW_MS - IDLE_TIMEOUT_MS + 10 * MINUTE, at - IDLE_TIMEOUT_MS - 10 * MINUTE
        )
        duration = rng.randint(10, 60) * MINUTE
        crashed = builder.session(last - duration, duration, ends=False, healthy=False)
        crashed.faults.append("silent end without observe")
    for _ in range(counts.ended_without_observe):
        end = rng.randint(w0 + 5 * MINUTE, at - 20 * MINUTE)
        duration = rng.randint(10, 50) * MINUTE
        unobserved = builder.session(end - duration, duration, observe_end=False, healthy=False)
        unobserved.faults.append("end without observe")
    for i in range(counts.answered_without_recall):
        # A question in the window answered without a recall: none at all, or one
        # only after the reply (alternately); the session is otherwise healthy.
        start = rng.randint(w0 + 2 * MINUTE, at - 60 * MINUTE)
        broken = ("no_recall", "recall_after_reply")[i % 2]
        talking = builder.session(
            start, rng.randint(30, 50) * MINUTE, healthy=False, talks=True, broken_turn=broken
        )
        talking.faults.append("answer without recall")
    for _ in range(counts.unobserved_compactions):
        # The session's only compaction, far from its end observe, so nothing else covers it.
        compaction = rng.randint(w0 + 10 * MINUTE, at - 90 * MINUTE)
        start = compaction - rng.randint(10, 30) * MINUTE
        end = compaction + rng.randint(25, 50) * MINUTE
        compacted = builder.session(
            start, end - start, compactions=[compaction], unobserved=[compaction], healthy=False
        )
        compacted.faults.append("compaction without observe")


def _other_outcome_near(session: Session, run: ObserveRun) -> bool:
    """Whether another outcome of the session would answer this run's requests."""
    low, high = run.requested.ts, run.started.ts + OBSERVE_GRACE_MS
    return any(
        other is not run and other.outcome.keep and low <= other.outcome.ts <= high
        for other in session.runs
    )


def inject_lost_observes(builder: Builder, runs: int) -> int:
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
        session.faults.append("lost observe")
        run.outcome.keep = False
        for gate in run.gates:
            gate.keep = False
    return 2 * runs


def _outcomes(builder: Builder, low: int, high: int) -> list[Event]:
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


def _all_recalls(builder: Builder) -> list[Recall]:
    return [r for s in builder.sessions for r in s.recalls] + builder.cli_recalls


def _fail(builder: Builder, event: Event, attempt: int) -> None:
    """Turn an observe outcome into a store failure."""
    template = builder.rng.choice(STORE_ERRORS)
    event.action = "observe.store.failed"
    event.success, event.level = 0, "error"
    event.error = template.format(n=builder.rng.randint(1000, 9999))
    event.metadata = {
        "sessionId": event.metadata["sessionId"],
        "trigger": event.metadata["trigger"],
        "attempt": attempt,
    }


def inject_failure_streak(builder: Builder) -> tuple[int, int]:
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
    session.faults.append("failure streak")
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
        session.runs.append(ObserveRun(requested, started, [], failed))
    return low, low + span


def _slow_needed(recalls_in_window: int) -> int:
    """Slow recalls that put the nearest-rank p95 at or above 3 s, with a margin."""
    at_p95_or_above = recalls_in_window - math.ceil(0.95 * recalls_in_window) + 1
    return at_p95_or_above + max(1, math.ceil(0.02 * recalls_in_window))


def _make_slow(builder: Builder, recall: Recall) -> None:
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


def inject_slow_recalls(builder: Builder, reserved: tuple[int, int]) -> int:
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
    picked = builder.rng.sample(candidates, needed)
    for recall in picked:
        _make_slow(builder, recall)
    for session in builder.sessions:
        if any(recall in picked for recall in session.recalls):
            session.faults.append("slow recall")
    return needed


def inject_failed_observes(builder: Builder, lost: int) -> int:
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
        for owner in builder.sessions:
            if any(run.outcome is outcomes[i] for run in owner.runs):
                owner.faults.append("failed observe")
    if picked < needed:
        raise RuntimeError("too few observe outcomes in the window to fail some")
    return len(failed)


# -- agent deviations ------------------------------------------------------


def _deviation_slot(
    builder: Builder, session: Session, low: int, high: int, min_prior: int
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
    builder: Builder, session: Session, prior: list[str], kind: str
) -> dict[str, Any]:
    """The deviation metadata; `kind` says how (or whether) it breaks the contract."""
    rng = builder.rng
    evidence = rng.sample(prior, min(len(prior), rng.randint(1, 5)))
    payload: dict[str, Any] = {
        "session_id": session.id,
        "agente": rng.choice(AGENTS),
        "tipo": rng.choice(DEVIATION_TYPES),
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


def _place_deviation(builder: Builder, pool: list[Session], kind: str, low: int, high: int) -> bool:
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
        if kind != "conforming":
            session.faults.append(f"deviation {kind}")
        return True
    return False


def inject_deviations(builder: Builder, counts: FaultCounts) -> None:
    """Conforming deviation events over the day, and faulty ones in the window."""
    w0, at = builder.window_start(), builder.at_ms
    pool = [s for s in builder.sessions if s.healthy]
    builder.rng.shuffle(pool)
    faulty = [kind for kind in BREACH_KINDS for _ in range(counts.breaches_per_kind)]
    faulty += ["missing_evidence"] * counts.missing_evidence
    for kind in faulty:
        if not _place_deviation(builder, pool, kind, w0 + MINUTE, at - MINUTE):
            raise RuntimeError(f"no session in the window can carry a {kind} deviation")
    for _ in range(counts.conforming_deviations):
        _place_deviation(builder, pool, "conforming", at - LOOKBACK_MS, at)


# -- rows ------------------------------------------------------------------
