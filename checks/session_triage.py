"""The triage of coverage checks, from what the session query carried (`sessions.carry_triage`).

A failing session's dimensions are those of its first event; the oldest 20
failing sessions come with what each missed, in the words of docs/spec.md
section 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checks.breakdown import FailingSession, Triage, grouped
from checks.kinds import Anchor, CheckSpec, Coverage, Obligation
from watchdog.core.times import from_ms


def coverage_triage(spec: CheckSpec, row: dict[str, Any], tag: str, dims: Sequence[str]) -> Triage:
    """A coverage check's triage, from what `carry_triage` put in the row."""
    assert isinstance(spec.params, Coverage)
    sessions = failing_sessions(spec.params.obligations, row[f"{tag}_sessions"] or [])
    counts = {d: row[f"{tag}_by_{d}"] for d in dims}
    return grouped(int(row[f"{tag}_items"]), counts, dims, noun="sessions", sessions=sessions)


def obligation_label(ob: Obligation, silent: bool = False) -> str:
    """An obligation in the words of docs/spec.md section 4."""
    if ob.label and ob.anchor is not Anchor.END:
        return ob.label
    if ob.anchor is Anchor.START:
        return "start recall"
    if ob.anchor is Anchor.END:
        return "end observe (silent end)" if silent else "end observe (end event)"
    return "recall injection" if ob.positive_results else "compaction observe"


def missed(obligations: Sequence[Obligation], flags: Sequence[int]) -> tuple[str, ...]:
    """What one failing session missed, from its (unmet count, ended) flags per obligation."""
    found = []
    for k, ob in enumerate(obligations):
        count, ended = int(flags[2 * k]), int(flags[2 * k + 1])
        if count:
            label = obligation_label(ob, silent=not ended)
            found.append(label if count == 1 else f"{label} x{count}")
    return tuple(found)


def failing_sessions(
    obligations: Sequence[Obligation], rows: Sequence[Sequence[Any]]
) -> tuple[FailingSession, ...]:
    """The failing sessions from (first_seen ms, id, last_seen ms, events, flags) rows."""
    return tuple(
        FailingSession(
            session_id=str(session_id),
            first_seen=from_ms(int(first_seen)),
            last_seen=from_ms(int(last_seen)),
            events=int(n_events),
            missed=missed(obligations, raw),
        )
        for first_seen, session_id, last_seen, n_events, raw in rows
    )
