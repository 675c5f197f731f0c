"""Obligations with a deadline (docs/spec.md section 4): the one rule, in one place.

An obligation hangs on the session's start, its end, or each trigger event;
it is due at its deadline and met by one of its `required` events in
`[anchor - lead, deadline]`. A window judges the obligations whose deadline
falls in it. `judge` adds an obligation to a session scan; the coverage and
outcome-rate kinds (and their triage) judge theirs with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from checks.scans.binder import AT, WS
from checks.scans.row import EVENT
from checks.scans.session import PayloadMatch, SessionScan
from watchdog.core.durations import format_ms

# A trigger with its deadline.
DEADLINED = "Tuple(t Int64, hash UInt64, id String, deadline Int64)"


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
        grace = format_ms(self.grace_ms)
        if self.anchor is Anchor.START:
            return [(self.grace_key, f"{grace} after the first event")]
        if self.anchor is Anchor.END:
            return [
                (self.grace_key, f"{grace} after the end event"),
                ("idle_timeout", f"{format_ms(self.idle_ms)} (a silent end)"),
                ("observe lead", f"{format_ms(self.lead_ms)} before the end"),
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
    misses: str | None  # Anchor.EVENT: (time, id hash, event id) of each unmet trigger
    has_end: str | None  # Anchor.END: whether the session had an end event


@dataclass(frozen=True)
class _Rule:
    """An obligation's bound durations in a scan, and where its deadline and met range lie."""

    grace: str
    lead: str
    idle: str

    @staticmethod
    def of(scan: SessionScan, ob: Obligation) -> _Rule:
        return _Rule(
            scan.bind(ob.grace_ms, "Int64"),
            scan.bind(ob.lead_ms, "Int64"),
            scan.bind(ob.idle_ms, "Int64"),
        )

    def start(self) -> tuple[str, str, str]:
        """(deadline, met from, met until) of the start obligation."""
        deadline = f"first_seen + {self.grace}"
        return deadline, f"first_seen - {self.lead}", deadline

    def end(self, end: str, silent: bool) -> tuple[str, str, str]:
        """(deadline, met from, met until) of the end obligation, with an end event or silent.

        An end event sets the deadline at end + grace; without one the session
        ends silently at last_seen, judged once idle for idle_timeout.
        """
        if silent:
            return f"last_seen + {self.idle}", f"last_seen - {self.lead}", "last_seen"
        return f"{end} + {self.grace}", f"{end} - {self.lead}", f"{end} + {self.grace}"

    def deadlined(self, scan: SessionScan, tag: str, ob: Obligation, triggers: str) -> str:
        """Per session: each trigger in `triggers` with its deadline (DEADLINED).

        The deadline is trigger + grace, or with `until` the first `until`
        event after it (ts > the trigger's) when that comes sooner.
        """
        if not ob.until:
            return f"arrayMap(c -> CAST((c.t, c.hash, c.id, c.t + {self.grace}) AS {DEADLINED}), {triggers})"
        closers = scan.times(ob.until, side=True)
        return scan.per_session(
            f"{tag}_deadlined",
            f"arrayMap(c -> CAST((c.t, c.hash, c.id, arrayMin(arrayConcat([c.t + {self.grace}],"
            f" arrayFilter(x -> x > c.t, {closers})))) AS {DEADLINED}), {triggers})",
        )


def _triggers(scan: SessionScan, tag: str, ob: Obligation, may_be_due: Callable[[str], str]) -> str:
    """Per session: the obligation's triggers (EVENT) that may be due."""
    # An obligation closed by `until` (a response to each human message) reads
    # conversation events: they are kept aside from the memory events.
    return scan.triggers(
        ob.triggers,
        tag=tag,
        may_be_due=may_be_due,
        positive=ob.positive_results,
        skip=ob.skip,
        side=bool(ob.until),
    )


def judge(scan: SessionScan, tag: str, ob: Obligation) -> Judging:
    """Add `ob` to `scan`: per session, how many are due in W and how many of those are unmet."""
    met_by = scan.times(ob.required)
    rule = _Rule.of(scan, ob)

    def in_window(deadline: str) -> str:
        return f"{deadline} >= {WS} AND {deadline} < {AT}"

    def met(low: str, high: str) -> str:
        return f"arrayExists(x -> x >= {low} AND x <= {high}, {met_by})"

    due, unmet = f"{tag}_due", f"{tag}_unmet"
    # An obligation due in W looks back at events from its grace and lead before W at most.
    scan.near(ob.grace_ms + ob.lead_ms)
    if ob.anchor is Anchor.START:
        deadline, low, high = rule.start()
        scan.per_session(due, f"toUInt32({in_window(deadline)})")
        scan.per_session(unmet, f"toUInt32({due} AND NOT {met(low, high)})")
        return Judging(due, unmet, None, None)
    if ob.anchor is Anchor.END:
        has_end, end = scan.first_of(ob.ends)
        ended, silent = rule.end(end, silent=False), rule.end(end, silent=True)
        deadline = scan.per_session(f"{tag}_deadline", f"if({has_end}, {ended[0]}, {silent[0]})")
        scan.per_session(due, f"toUInt32({in_window(deadline)})")
        # A silent end is met by an event in [last_seen - lead, last_seen]: the last one of
        # `required` is at most last_seen, so it is met when that one is late enough.
        met_any, _ = scan.first_of(ob.required)
        last_met = scan.last_of(ob.required)
        scan.per_session(
            unmet,
            f"toUInt32({due} AND NOT if({has_end}, {met(*ended[1:])},"
            f" {met_any} AND {last_met} >= {silent[1]}))",
        )
        return Judging(due, unmet, None, has_end)

    # A trigger's deadline is at most its time + grace (sooner with `until`), and every
    # trigger is before `at`: one whose time + grace is before W is never due.
    def may_be_due(t: str) -> str:
        bound = f"{t} + {rule.grace} >= {WS}"
        return bound if ob.until else f"{bound} AND {t} + {rule.grace} < {AT}"

    triggers = _triggers(scan, tag, ob, may_be_due)
    if ob.until:
        triggers = rule.deadlined(scan, tag, ob, triggers)
        deadline = "c.deadline"
    else:
        deadline = f"c.t + {rule.grace}"
    dues = scan.per_session(f"{tag}_dues", f"arrayFilter(c -> {in_window(deadline)}, {triggers})")
    scan.per_session(due, f"length({dues})")
    missed = f"arrayFilter(c -> NOT {met(f'c.t - {rule.lead}', deadline)}, {dues})"
    # Misses are EVENTs, whatever the triggers carried.
    misses = scan.per_session(
        f"{tag}_misses",
        f"arrayMap(c -> CAST((c.t, c.hash, c.id) AS {EVENT}), {missed})" if ob.until else missed,
    )
    scan.per_session(unmet, f"length({misses})")
    return Judging(due, unmet, misses, None)


def listed(scan: SessionScan, tag: str, ob: Obligation) -> str:
    """Add `ob` to `scan` as a list: per session, every obligation it had.

    Each is (trigger time, trigger event id, deadline, the event id that met
    it or ''), by the rule `judge` counts with; the trigger of a start is the
    session's first event (no id), of a silent end its last event. The scan
    must read role events from the lookback's start (its window as long as
    its lookback: `checks.explain`).
    """
    met_by = scan.events_of(ob.required)
    rule = _Rule.of(scan, ob)

    def met(low: str, high: str) -> str:
        return f"arrayFirst(x -> x.t >= {low} AND x.t <= {high}, {met_by}).id"

    if ob.anchor is Anchor.START:
        deadline, low, high = rule.start()
        return scan.per_session(
            f"{tag}_listed", f"[(first_seen, '', {deadline}, {met(low, high)})]"
        )
    if ob.anchor is Anchor.END:
        has_end, end = scan.first_of(ob.ends)
        end_id = scan.first_id_of(ob.ends)
        ended, silent = rule.end(end, silent=False), rule.end(end, silent=True)
        return scan.per_session(
            f"{tag}_listed",
            f"if({has_end}, [({end}, {end_id}, {ended[0]}, {met(*ended[1:])})],"
            f" [(last_seen, '', {silent[0]}, {met(*silent[1:])})])",
        )
    triggers = rule.deadlined(scan, tag, ob, _triggers(scan, tag, ob, lambda t: "1"))
    return scan.per_session(
        f"{tag}_listed",
        f"arrayMap(c -> (c.t, c.id, c.deadline, {met(f'c.t - {rule.lead}', 'c.deadline')}), {triggers})",
    )
