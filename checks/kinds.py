"""Check kinds: the parameterised shapes every check is an instance of.

The twelve built-in checks of docs/spec.md section 5 are declared in
`checks.builtin` as instances of these kinds; custom checks from config are
instances too. A kind's parameters are plain values: event names, durations
in milliseconds, payload keys.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Literal

from checks.base import Comparison, NoDataPolicy, Severity, Window


class Anchor(StrEnum):
    """What an obligation hangs on."""

    START = "start"  # the session's first event
    END = "end"  # its first end event, else a silent end after idle_timeout
    EVENT = "event"  # each trigger event


class Counted(StrEnum):
    """What a coverage check counts: the sessions that missed, or the trigger events."""

    SESSIONS = "sessions"
    EVENTS = "events"


@dataclass(frozen=True)
class PayloadMatch:
    """Events whose payload `field` (a string) is one of `values`."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Obligation:
    """A rule with a deadline (docs/spec.md section 4).

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
    label: str = ""  # the obligation in the words of SPEC section 4 (triage); "" derives one


@dataclass(frozen=True)
class Coverage:
    """Sessions with an obligation due in W and unmet."""

    obligations: tuple[Obligation, ...]
    # no_data also when none of these events exists within lookback (a source
    # that never emits them cannot be judged).
    requires_seen: tuple[str, ...] = ()
    noun: str = "sessions"
    breach_phrase: str = "missed an obligation"
    session_filter: str | None = None  # SQL: only sessions with a matching event are judged
    # EVENTS: value, sample and evidence are the trigger events (every obligation is
    # Anchor.EVENT), not the sessions.
    counted: Counted = Counted.SESSIONS

    def __post_init__(self) -> None:
        if self.counted is Counted.EVENTS and any(
            ob.anchor is not Anchor.EVENT for ob in self.obligations
        ):
            raise ValueError("a coverage check counting events needs trigger events")


@dataclass(frozen=True)
class OutcomeRate:
    """(failed + lost) / (completed + failed + lost) in W."""

    started: tuple[str, ...]
    completed: tuple[str, ...]
    failed: tuple[str, ...]
    grace_ms: int
    noun: str = "operations"

    @property
    def loss(self) -> Obligation:
        return Obligation(
            anchor=Anchor.EVENT,
            required=self.completed + self.failed,
            grace_ms=self.grace_ms,
            triggers=self.started,
        )


@dataclass(frozen=True)
class Quantile:
    """Exact nearest-rank quantile of a numeric field of `events` in W."""

    events: tuple[str, ...]
    q_num: int  # q as the fraction q_num / q_den, so the rank is exact integer arithmetic
    q_den: int
    field: str = "latency_ms"  # a normalized column, or `payload.<key>`
    noun: str = "events"


@dataclass(frozen=True)
class Streak:
    """Longest run of consecutive `bad` events among `bad + good` in W, by (ts, event_id)."""

    bad: tuple[str, ...]
    good: tuple[str, ...]


@dataclass(frozen=True)
class Share:
    """Share of `events` in W whose payload `field` equals `value`."""

    events: tuple[str, ...]
    field: str
    value: str
    noun: str = "events"


@dataclass(frozen=True)
class Freshness:
    """Seconds from the newest event (of `events`, or of any name) to `at`."""

    events: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviationContract:
    """Deviation events in W that break the payload contract."""

    events: tuple[str, ...]
    allowed_keys: tuple[str, ...]
    tipos: tuple[str, ...]
    max_evidence: int
    agents: tuple[str, ...] = ()  # the agent names allowed; empty: any name of AGENT_NAME


@dataclass(frozen=True)
class DeviationEvidence:
    """Conforming deviation events in W citing an evidence id that exists nowhere."""

    contract: DeviationContract


KindParams = (
    Coverage
    | OutcomeRate
    | Quantile
    | Streak
    | Share
    | Freshness
    | DeviationContract
    | DeviationEvidence
)

Unit = Literal["count", "ratio", "ms", "s"]


@dataclass(frozen=True)
class CheckSpec:
    """One configured check: its identity, verdict rule and kind parameters."""

    id: str
    params: KindParams
    target: float
    comparison: Comparison
    severity: Severity
    min_samples: int
    unit: Unit
    description: str
    enabled: bool = True
    window_ms: int | None = None  # a check-specific window length (multi-window alerting)
    no_data: NoDataPolicy = NoDataPolicy.KEEP_STATE  # what `no_data` does to its alert

    @property
    def kind(self) -> str:
        return type(self.params).__name__

    def window_for(self, window: Window) -> Window:
        """The window this check is judged over: its own length if it has one, else `window`."""
        if self.window_ms is None:
            return window
        return replace(window, length=timedelta(milliseconds=self.window_ms))
