"""Obligations with a deadline (docs/spec.md section 4): the one rule, in one place.

An obligation hangs on the session's start, its end, or each trigger event;
it is due at its deadline and met by one of its `required` events in
`[anchor - lead, deadline]`. A window judges the obligations whose deadline
falls in it. `judge` adds an obligation to a session scan; the coverage and
outcome-rate kinds (and their triage) judge theirs with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from checks.kinds.base import duration
from checks.scans.binder import AT, WS
from checks.scans.session import PayloadMatch, SessionScan


class Anchor(StrEnum):
    """What an obligation hangs on."""

    START = "start"  # the session's first event
    END = "end"  # its first end event, else a silent end after idle_timeout
    EVENT = "event"  # each trigger event


@dataclass(frozen=True)
class Obligation:
    """A rule with a deadline.

    Met when one of `required` happens in [anchor - lead, deadline]; the
    deadline is anchor + grace, or for Anchor.EVENT with `until` the first
    of `until` after the trigger when that comes sooner (a silent end: due
    at last_seen + idle, met in [last_seen - lead, last_seen]).
    """

    anchor: Anchor
    required: tuple[str, ...]
    grace_ms: int
    lead_ms: int = 0
    triggers: tuple[str, ...] = ()  # Anchor.EVENT: the events that create an obligation
    ends: tuple[str, ...] = ()  # Anchor.END: the session's end events
    idle_ms: int = 0  # Anchor.END: a session without an end event ends after this
    positive_results: bool = False  # Anchor.EVENT: only triggers with result_count > 0
    # Anchor.EVENT: the first of these after the trigger (ts > the trigger's) is the
    # deadline, when it comes before trigger + grace ("X before Y, after each Z").
    until: tuple[str, ...] = ()
    # Anchor.EVENT: triggers matching this create no obligation (trivial human messages).
    skip: PayloadMatch | None = None
    # In the words of docs/spec.md section 4 (triage): "compaction observe".
    label: str = ""
    # For the page: the config key that sets the grace, and what it counts from.
    grace_key: str = "grace"
    after: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError("an obligation needs its label")

    def missed(self, silent: bool = False) -> str:
        """What a session that did not meet this obligation missed (an end: silent or not)."""
        if self.anchor is Anchor.END:
            return f"{self.label} ({'silent end' if silent else 'end event'})"
        return self.label

    def described(self) -> list[tuple[str, str]]:
        """The parameters that define it, for a reader."""
        grace = duration(self.grace_ms)
        if self.anchor is Anchor.START:
            return [(self.grace_key, f"{grace} after the first event")]
        if self.anchor is Anchor.END:
            return [
                (self.grace_key, f"{grace} after the end event"),
                ("idle_timeout", f"{duration(self.idle_ms)} (a silent end)"),
                ("observe lead", f"{duration(self.lead_ms)} before the end"),
            ]
        after = self.after or f"after each {' or '.join(self.triggers)}"
        if self.until and not self.after:
            after += f", or sooner at the first {' or '.join(self.until)}"
        return [(self.grace_key, f"{grace} {after}")]


@dataclass(frozen=True)
class Judging:
    """The per-session columns of one obligation in a session scan."""

    due: str  # how many are due in W
    unmet: str  # how many of those are unmet
    misses: str | None  # Anchor.EVENT: (time, event id) of each unmet trigger
    has_end: str | None  # Anchor.END: whether the session had an end event


def judge(scan: SessionScan, tag: str, ob: Obligation) -> Judging:
    """Add `ob` to `scan`: per session, how many are due in W and how many of those are unmet."""
    met_by = scan.times(ob.required)
    # Every deadline lies at most the grace (or, for a silent end, idle_timeout) after the
    # session's last event.
    scan.reaching(max(ob.grace_ms, ob.idle_ms))
    grace = scan.bind(ob.grace_ms, "Int64")
    lead = scan.bind(ob.lead_ms, "Int64")

    def in_window(deadline: str) -> str:
        return f"{deadline} >= {WS} AND {deadline} < {AT}"

    due, unmet = f"{tag}_due", f"{tag}_unmet"
    if ob.anchor is Anchor.START:
        deadline = f"first_seen + {grace}"
        scan.per_session(due, f"toUInt32({in_window(deadline)})")
        scan.per_session(
            unmet,
            f"toUInt32({due} AND NOT arrayExists("
            f"x -> x >= first_seen - {lead} AND x <= {deadline}, {met_by}))",
        )
        return Judging(due, unmet, None, None)
    if ob.anchor is Anchor.END:
        has_end, end = scan.first_of(ob.ends)
        idle = scan.bind(ob.idle_ms, "Int64")
        # An end event sets the deadline at end + grace; without one the session
        # ends silently at last_seen, judged once idle for idle_timeout.
        deadline = scan.per_session(
            f"{tag}_deadline", f"if({has_end}, {end} + {grace}, last_seen + {idle})"
        )
        scan.per_session(due, f"toUInt32({in_window(deadline)})")
        scan.per_session(
            unmet,
            f"toUInt32({due} AND NOT if({has_end},"
            f" arrayExists(x -> x >= {end} - {lead} AND x <= {end} + {grace}, {met_by}),"
            f" arrayExists(x -> x >= last_seen - {lead} AND x <= last_seen, {met_by})))",
        )
        return Judging(due, unmet, None, has_end)

    # A trigger's deadline is at most its time + grace (sooner with `until`), and every
    # trigger is before `at`: one whose time + grace is before W is never due.
    def may_be_due(t: str) -> str:
        bound = f"{t} + {grace} >= {WS}"
        return bound if ob.until else f"{bound} AND {t} + {grace} < {AT}"

    # An obligation closed by `until` (a response to each human message) reads
    # conversation events: they are kept aside from the memory events.
    side = bool(ob.until)
    triggers = scan.triggers(
        ob.triggers,
        tag=tag,
        may_be_due=may_be_due,
        positive=ob.positive_results,
        skip=ob.skip,
        side=side,
    )
    if ob.until:
        # Each trigger's deadline (c.3): trigger + grace, or the first `until` event
        # after it (ts > the trigger's) when that comes sooner.
        closers = scan.times(ob.until, side)
        triggers = scan.per_session(
            f"{tag}_deadlined",
            f"arrayMap(c -> (c.1, c.2, arrayMin(arrayConcat([c.1 + {grace}],"
            f" arrayFilter(x -> x > c.1, {closers})))), {triggers})",
        )
        deadline = "c.3"
    else:
        deadline = f"c.1 + {grace}"
    dues = scan.per_session(f"{tag}_dues", f"arrayFilter(c -> {in_window(deadline)}, {triggers})")
    scan.per_session(due, f"length({dues})")
    missed = (
        f"arrayFilter(c -> NOT arrayExists("
        f"x -> x >= c.1 - {lead} AND x <= {deadline}, {met_by}), {dues})"
    )
    # Misses are (time, event id), whatever the triggers carried.
    misses = scan.per_session(
        f"{tag}_misses", f"arrayMap(c -> (c.1, c.2), {missed})" if ob.until else missed
    )
    scan.per_session(unmet, f"length({misses})")
    return Judging(due, unmet, misses, None)
