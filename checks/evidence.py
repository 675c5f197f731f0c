"""What a check's verdict rests on (ids, named counts, breach kinds, times; never a payload
value), as one value: `to_json` is the report's `evidence` (its shapes: docs/spec.md#5-checks)
and `shown` the display facts every output renders, shown wherever the evidence is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchdog.core.text import plural
from watchdog.core.times import rfc3339


@dataclass(frozen=True)
class FailureRun:
    """The earliest longest run of consecutive failures: its first and last event, its length."""

    start: datetime
    end: datetime
    length: int


@dataclass(frozen=True)
class Fact:
    """One line of evidence for a person: `counts: 116 completed, 7 failed, 6 lost`."""

    label: str
    text: str


@dataclass(frozen=True)
class ListedEvent:
    """A listed event as a person follows it: its session, latency and error class (each ''
    or None when it has none; the error class only where the report shows error classes)."""

    event_id: str
    name: str = ""
    session_id: str = ""
    latency_ms: float | None = None
    error_class: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "name": self.name,
            "session_id": self.session_id or None,
            "latency_ms": self.latency_ms,
            "error_class": self.error_class or None,
        }

    def words(self) -> str:
        """`session s1, memory.observe.failed, 412 ms, error: qdrant timeout`."""
        parts = [f"session {self.session_id}" if self.session_id else "no session"]
        parts += [self.name] if self.name else []
        parts += [f"{self.latency_ms:.0f} ms"] if self.latency_ms is not None else []
        parts += [f"error: {self.error_class}"] if self.error_class else []
        return ", ".join(parts)


@dataclass(frozen=True)
class IdList:
    """Opaque ids (oldest first, at most 20) and what they are: `sessions` or `events`; for
    events, what the evidence lookup found of each (`details`, by id)."""

    noun: str
    ids: tuple[str, ...]
    details: tuple[ListedEvent, ...] = ()

    def detail(self, event_id: str) -> ListedEvent | None:
        return next((d for d in self.details if d.event_id == event_id), None)


@dataclass(frozen=True)
class Shown:
    """The display facts of one result's evidence: the id lists, then the other facts."""

    ids: tuple[IdList, ...]
    facts: tuple[Fact, ...]

    def __bool__(self) -> bool:
        return bool(self.ids or self.facts)


@dataclass(frozen=True)
class Evidence:
    """The evidence of one check result; a field left None is not part of this check's evidence."""

    sessions: tuple[str, ...] | None = None  # coverage: the failing sessions
    events: tuple[str, ...] | None = None  # the failing, slow or matching events
    completed: int | None = None  # outcome rate
    failed: int | None = None
    lost: int | None = None
    at_or_above_target: int | None = None  # quantile
    matching: int | None = None  # share
    missing_ids: int | None = None  # deviation evidence: distinct cited ids found nowhere
    kinds: tuple[tuple[str, int], ...] | None = None  # deviation contract: breach kind, count
    run: FailureRun | None = None  # streak
    newest: datetime | None = None  # freshness: the newest event before the evaluation time
    no_event: bool = False  # freshness: no event at all before the evaluation time
    details: tuple[ListedEvent, ...] | None = None  # `events` looked up (checks.listed)

    def __post_init__(self) -> None:
        if self.no_event and self.newest is not None:
            raise ValueError("Evidence: no_event and newest exclude each other")

    def _counts(self) -> list[tuple[str, int]]:
        counts = (
            ("completed", self.completed),
            ("failed", self.failed),
            ("lost", self.lost),
            ("at_or_above_target", self.at_or_above_target),
            ("matching", self.matching),
            ("missing_ids", self.missing_ids),
        )
        return [(name, n) for name, n in counts if n is not None]

    def to_json(self) -> dict[str, Any]:
        """The report's `evidence` object, its keys in the order the report always had."""
        kinds = dict(self.kinds) if self.kinds is not None else None
        found: list[tuple[str, Any]] = [
            ("sessions", list(self.sessions) if self.sessions is not None else None),
            ("completed", self.completed),
            ("failed", self.failed),
            ("lost", self.lost),
            ("events", list(self.events) if self.events is not None else None),
            ("at_or_above_target", self.at_or_above_target),
            ("matching", self.matching),
            ("kinds", kinds),
            ("missing_ids", self.missing_ids),
        ]
        out = {key: value for key, value in found if value is not None}
        if self.run is not None:
            out.update(
                start=rfc3339(self.run.start), end=rfc3339(self.run.end), length=self.run.length
            )
        if self.newest is not None or self.no_event:
            out["newest"] = rfc3339(self.newest) if self.newest is not None else None
        if self.details is not None:
            out["event_details"] = [d.to_json() for d in self.details]
        return out

    def shown(self) -> Shown:
        """The facts a person reads, in one order for every output: ids, counts, kinds, run, newest."""
        ids = tuple(
            IdList(noun, found, self.details or () if noun == "events" else ())
            for noun, found in (("sessions", self.sessions), ("events", self.events))
            if found
        )
        facts: list[Fact] = []
        counts = self._counts()
        if counts:
            facts.append(
                Fact("counts", ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in counts))
            )
        if self.kinds:
            text = ", ".join(f"{kind.replace('_', ' ')} {n}" for kind, n in self.kinds)
            facts.append(Fact("breach kinds", text))
        if self.run is not None:
            run = self.run
            facts.append(
                Fact(
                    "longest run",
                    f"{plural(run.length, 'failure')} from {rfc3339(run.start)}"
                    f" to {rfc3339(run.end)}",
                )
            )
        if self.newest is not None:
            facts.append(Fact("newest event", rfc3339(self.newest)))
        return Shown(ids, tuple(facts))
