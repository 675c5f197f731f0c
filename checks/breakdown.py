"""The triage breakdown of one breached check, as a value: its failing items counted and grouped
by the source's dimensions, a coverage check's failing sessions, or why it could not run;
`to_json` is the report's `triage` entry (docs/spec.md section 6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchdog.core.times import rfc3339

TOP = 10


@dataclass(frozen=True)
class Group:
    """One value of a dimension: how many failing items have it, and their share of all."""

    value: str
    count: int
    share: float

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "count": self.count, "share": self.share}


@dataclass(frozen=True)
class Dimension:
    """A dimension of the source (`component`, `ServiceName`) and its top groups, biggest first."""

    name: str
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class FailingSession:
    """A session that missed an obligation: when it was seen, how many events, what it missed."""

    session_id: str
    first_seen: datetime
    last_seen: datetime
    events: int
    missed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "first_seen": rfc3339(self.first_seen),
            "last_seen": rfc3339(self.last_seen),
            "events": self.events,
            "missed": list(self.missed),
        }


@dataclass(frozen=True)
class Triage:
    """The breakdown of one breached check's failing items, or why there is none."""

    items: int = 0
    noun: str = "events"  # what the items are: events or sessions
    dimensions: tuple[Dimension, ...] = ()
    sessions: tuple[FailingSession, ...] | None = None  # coverage checks: the oldest 20
    error: str = ""  # the breakdown could not run: why

    @classmethod
    def failed(cls, problem: str) -> Triage:
        """The entry of a breakdown whose query failed."""
        return cls(error=f"could not compute the breakdown: {problem}")

    def to_json(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        out: dict[str, Any] = {
            "items": self.items,
            "groups": {d.name: [g.to_json() for g in d.groups] for d in self.dimensions},
            "noun": self.noun,
        }
        if self.sessions is not None:
            out["sessions"] = [s.to_json() for s in self.sessions]
        return out


def grouped(
    items: int,
    counts: Mapping[str, Any],
    dims: Sequence[str],
    noun: str = "events",
    sessions: tuple[FailingSession, ...] | None = None,
) -> Triage:
    """A Triage from per-dimension counts (value -> count, as a ClickHouse `sumMap` gives them).

    The top TOP values of each dimension, most failing items first, ties by
    value; a dimension with no value is left out.
    """
    dimensions = []
    for dim in dims:
        keys, values = counts[dim] if counts.get(dim) else ((), ())
        ranked = sorted(zip(keys, values, strict=True), key=lambda kv: (-int(kv[1]), str(kv[0])))
        groups = tuple(
            Group(str(value), int(n), int(n) / items if items else 0.0) for value, n in ranked[:TOP]
        )
        if groups:
            dimensions.append(Dimension(dim, groups))
    return Triage(items=items, noun=noun, dimensions=tuple(dimensions), sessions=sessions)
