"""Healthy agent sessions and background traffic, emitted by one seeded `Builder`.

The memory events carry the default names of the event roles (docs/spec.md#3-event-roles),
among tool calls, messages, heartbeats and other traffic the checks do not judge.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from watchdog.demo.model import (
    CHANNELS,
    HANDLE_WORDS,
    LOOKBACK_MS,
    MINUTE,
    QUERY_TEMPLATES,
    QUESTION_KINDS,
    SECOND,
    SLOW_RECALL_MS,
    TOOLS,
    TOPICS,
    TRIVIAL_KINDS,
    TRIVIAL_SHARE,
    VERDICT_WEIGHTS,
    VERDICTS,
    WINDOW_MS,
    Event,
    ObserveRun,
    Recall,
    Session,
    Turn,
)


class Builder:
    """Emits events into sessions and the background, from one seeded rng."""

    def __init__(self, rng: random.Random, at_ms: int) -> None:
        self.rng = rng
        # A second stream for the knowledge-retrieval events, seeded from the first
        # without drawing from it: the memory events stay what they were for a seed.
        self.side = random.Random(str(rng.getstate()[1][:8]))
        self.at_ms = at_ms
        self.sessions: list[Session] = []
        self.background: list[Event] = []
        self.cli_recalls: list[Recall] = []

    # -- primitives --------------------------------------------------------

    def new_id(self) -> str:
        """A uuid4-shaped id drawn from the rng, so ids repeat with the seed."""
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def between(self, low: int, high: int) -> int:
        """A uniform integer in [low, high], or low when the range is empty."""
        return self.rng.randint(low, max(low, high))

    def emit(
        self,
        owner: Session | None,
        ts: int,
        action: str,
        *,
        source: str,
        component: str,
        column: str | None,
        metadata: dict[str, Any],
        system_id: str | None = None,
        duration_ms: int | None = None,
    ) -> Event:
        """Record one event in its session, or in the background when it has none."""
        event = Event(
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
        self, session: Session, ts: int, action: str, metadata: dict[str, Any], component: str
    ) -> Event:
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

    def worker(self, session: Session, ts: int, action: str, metadata: dict[str, Any]) -> Event:
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
        a, b, c = self.rng.sample(TOPICS, 3)
        text = self.rng.choice(QUERY_TEMPLATES).format(a=a, b=b, c=c)
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

    def new_session(self, *, healthy: bool = True) -> Session:
        sid = self.new_id()
        # Older emitters write a placeholder in the column; the id lives in metadata.
        column = sid if self.rng.random() < 0.3 else "interactive"
        system = self.rng.choice(("joel-mbp", "panda", "panda", "clanker"))
        session = Session(id=sid, column=column, system_id=system, healthy=healthy)
        self.sessions.append(session)
        return session

    def recall(self, session: Session, ts: int) -> Recall:
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
        recall = Recall(started, completed, injected)
        session.recalls.append(recall)
        return recall

    def knowledge(self, session: Session, ts: int) -> None:
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
                Event(
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

    def tool_calls(self, session: Session, start: int, end: int, *, last_at_end: bool) -> None:
        """Tool calls between start and end; sessions whose column has the id often omit it."""
        minutes = max(1, (end - start) // MINUTE)
        count = min(180, max(12, round(minutes * self.rng.uniform(0.4, 2.0))))
        times = sorted(self.between(start, end) for _ in range(count))
        if last_at_end:
            times[-1] = end
        for ts in times:
            tool = self.rng.choice(TOOLS)
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

    def message(self, session: Session, ts: int, kind: str | None) -> Event:
        """A human message reaching the agent; `kind` left out when None."""
        metadata: dict[str, Any] = {"channel": self.rng.choice(CHANNELS)}
        if kind is not None:
            metadata["kind"] = kind
        metadata["chars"] = (
            self.rng.randint(2, 20) if kind in TRIVIAL_KINDS else self.between(20, 900)
        )
        return self.pi(session, ts, "message.received", metadata, "conversation")

    def reply(self, session: Session, ts: int) -> Event:
        metadata = {"chars": self.between(40, 4_000)}
        return self.pi(session, ts, "message.sent", metadata, "conversation")

    def conversation(
        self, session: Session, first: int, end: int, start_recall: Recall | None, broken: str
    ) -> None:
        """Human messages and replies from `first` to `end`, a few minutes apart.

        The agent recalls memory after each question and replies once the
        recall is back; a greeting or an ack gets a quick reply and no recall.
        The first question is answered by the session's start recall. The
        second turn is `broken` when asked: `no_recall` (answered without
        one) or `recall_after_reply` (the recall came only after the answer).
        """
        ts, index = first, 0
        while ts < end - 2 * MINUTE or index == 0:
            trivial = (
                index > 0 and not (index == 1 and broken) and self.rng.random() < TRIVIAL_SHARE
            )
            kind = self.rng.choice(TRIVIAL_KINDS if trivial else QUESTION_KINDS)
            message = self.message(session, ts, kind)
            recall: Recall | None = None
            if index == 0:
                recall = start_recall
                answered = (recall.completed.ts if recall else ts) + self.between(
                    2 * SECOND, 30 * SECOND
                )
            elif trivial:
                answered = ts + self.between(SECOND, 6 * SECOND)
            elif index == 1 and broken:
                answered = ts + self.between(5 * SECOND, 40 * SECOND)
                if broken == "recall_after_reply":
                    recall = self.recall(session, answered + self.between(200, 5 * SECOND))
            else:
                recall = self.recall(session, ts + self.between(300, 2_500))
                answered = recall.completed.ts + self.between(2 * SECOND, 40 * SECOND)
            session.turns.append(Turn(message, recall, self.reply(session, answered)))
            ts, index = answered + self.between(3 * MINUTE, 12 * MINUTE), index + 1

    def observe_run(self, session: Session, ts: int, trigger: str) -> ObserveRun:
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
        gates: list[Event] = []
        tally, t = dict.fromkeys(VERDICTS, 0), started_ts
        for _ in range(self.rng.randint(1, 6)):
            t += self.between(300, 4_000)
            verdict = self.rng.choices(VERDICTS, VERDICT_WEIGHTS)[0]
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
        run = ObserveRun(requested, started, gates, outcome)
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
        talks: bool = False,
        broken_turn: str = "",
    ) -> Session:
        """One session: handle, recall, conversation, tool calls, compactions with observes, end.

        `recall_after` is the recall's delay after the first event (0: a
        few seconds, as a healthy session does; None: a cold start).
        `compactions` are absolute times, those also in `unobserved` get no
        observe. A session that `talks` has a conversation with a human
        (see `conversation`, `broken_turn`). A session that does not end
        stops with its last tool call at start + duration.
        """
        session = self.new_session(healthy=healthy)
        end = start + duration
        handle = f"{self.rng.choice(HANDLE_WORDS)}-{self.rng.randint(10, 99)}"
        self.pi(session, start, "session.handle.generated", {"handle": handle}, "session")
        self.knowledge(session, start)
        start_recall = None
        if recall_after is not None:
            start_recall = self.recall(
                session, start + (recall_after or self.between(300, 4 * SECOND))
            )
        if talks:
            # The human's first message opens the session; the start recall answers it.
            self.conversation(
                session, start + self.between(20, 250), end, start_recall, broken_turn
            )
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

    def all_events(self) -> Iterable[Event]:
        for session in self.sessions:
            yield from session.events
        yield from self.background

    def truncate(self) -> None:
        """Drop what would happen at or after `at`: those sessions are still running."""
        for event in self.all_events():
            if event.ts >= self.at_ms:
                event.keep = False

    def kept_events(self) -> list[Event]:
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


def build_healthy_sessions(builder: Builder, count: int) -> None:
    """Sessions all over the 24 hours; those still running at `at` are cut off there."""
    rng, at = builder.rng, builder.at_ms
    for _ in range(count):
        start = rng.randint(at - LOOKBACK_MS + MINUTE, at - 3 * MINUTE)
        duration = _healthy_duration(rng)
        compactions = _compaction_times(rng, start, duration)
        builder.session(start, duration, compactions=compactions, talks=True)


def build_background(builder: Builder, sessions: int) -> None:
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


def _cli_recall(builder: Builder, ts: int) -> None:
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
    builder.cli_recalls.append(Recall(None, event, None))


# -- faulty sessions, all judged in the last 4 hours -------------------------
