"""An SLO's figures at a time T, from its judged buckets: burn rates, budget, tiers, status.

Pure arithmetic over `Bucket`s (docs/slo.md#the-figures, docs/slo.md#tiers): no store, no
clock. The ledger judges the buckets; the report, the daemon's burn tick, the alerts, the
metrics and the page all read the one `SloFigures` that `figures` makes. Comparisons are
exact (fractions): a burn equal to a tier's factor does not fire, whatever the float
rounding of `1 - 0.99`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from watchdog.core.durations import format_duration

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Bucket:
    """One judged bucket `[start, start + bucket)`: its good and bad events, as the SLO's check
    counts them."""

    start: datetime
    good: int
    bad: int

    @property
    def total(self) -> int:
        return self.good + self.bad


class Alert(enum.StrEnum):
    """The alert a tier raises: `<name>:page` (critical) or `<name>:ticket` (warning)."""

    PAGE = "page"
    TICKET = "ticket"


class TierState(enum.StrEnum):
    FIRING = "firing"
    NO_DATA = "no_data"
    INSUFFICIENT_DATA = "insufficient_data"
    OK = "ok"


class SloStatus(enum.StrEnum):
    NO_DATA = "no_data"  # no event in the period (never 100%)
    EXHAUSTED = "exhausted"  # remaining <= 0
    TOO_FEW_EVENTS = "too_few_events"  # allowed < 1: one bad event overspends
    OK = "ok"


@dataclass(frozen=True)
class Tier:
    """One multiwindow burn-rate rule: it fires when both its windows burn faster than its
    factor, the rate that spends `share` of the period's budget within `long`."""

    name: str
    alert: Alert
    long: timedelta
    short: timedelta
    share: Fraction

    def factor(self, period: timedelta) -> Fraction:
        """share x period / long (14.4 for page-fast over 30 days)."""
        return self.share * Fraction(period // _SECOND, self.long // _SECOND)


_HOUR, _DAY = timedelta(hours=1), timedelta(days=1)

# The four tiers (the SRE Workbook's multiwindow, multi-burn-rate alerts; docs/spec.md
# section 11), pages first.
TIERS: tuple[Tier, ...] = (
    Tier("page-fast", Alert.PAGE, _HOUR, timedelta(minutes=5), Fraction(2, 100)),
    Tier("page-slow", Alert.PAGE, 6 * _HOUR, timedelta(minutes=30), Fraction(5, 100)),
    Tier("ticket-fast", Alert.TICKET, _DAY, 2 * _HOUR, Fraction(10, 100)),
    Tier("ticket-slow", Alert.TICKET, 3 * _DAY, 6 * _HOUR, Fraction(10, 100)),
)

# The burn windows the report shows, by label ("5m" ... "3d"), shortest first: every window
# of a tier.
WINDOWS: Mapping[str, timedelta] = {
    format_duration(w): w for w in sorted({w for tier in TIERS for w in (tier.long, tier.short)})
}


@dataclass(frozen=True)
class SloParams:
    """What an SLO's figures depend on: its objective (exact), its period, its bucket, and the
    fewest events a tier's long window must hold to judge it."""

    objective: Fraction  # strictly between 0 and 1
    period: timedelta
    bucket: timedelta
    min_events: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.objective < 1:
            raise ValueError(f"objective {self.objective} is not strictly between 0 and 1")
        if self.bucket <= timedelta(0) or self.period % self.bucket:
            raise ValueError("the period must hold whole buckets")

    @property
    def error_share(self) -> Fraction:
        """1 - objective: the share of events allowed to be bad."""
        return 1 - self.objective

    def factor(self, tier: Tier) -> Fraction:
        return tier.factor(self.period)

    def can_fire(self, tier: Tier) -> bool:
        """Whether any burn exceeds the tier's factor: the highest burn, every event bad, is
        1 / (1 - objective) (`config check` warns of a tier that never fires)."""
        return 1 / self.error_share > self.factor(tier)

    def aligned(self, moment: datetime) -> bool:
        """Whether `moment` is a bucket boundary (buckets are aligned to the Unix epoch)."""
        return (moment - _EPOCH) % self.bucket == timedelta(0)

    def floor(self, moment: datetime) -> datetime:
        """The start of the bucket holding `moment`."""
        return bucket_floor(moment, self.bucket)


def bucket_floor(moment: datetime, bucket: timedelta) -> datetime:
    """The start of the bucket of length `bucket` holding `moment` (aligned to the Unix epoch)."""
    return moment - (moment - _EPOCH) % bucket


@dataclass(frozen=True)
class Budget:
    """The error budget over the period: bad events allowed, spent, and the share left
    (1 - consumed / allowed, negative when overspent)."""

    allowed: float
    consumed: int
    remaining: float


@dataclass(frozen=True)
class TierFigures:
    """One tier at T: its factor, the burn of each of its windows, the events in its long
    window, and its state."""

    tier: Tier
    factor: float
    long_burn: float | None
    short_burn: float | None
    long_events: int
    state: TierState


@dataclass(frozen=True)
class SloFigures:
    """An SLO at T (docs/spec.md section 11): the period's events and budget, the share of its
    buckets judged, the burn of each window (None: no event in it), the tiers, the status and
    the seconds until the budget runs out at the 6h burn (None: it is not burning)."""

    at: datetime
    good: int
    bad: int
    coverage: float
    budget: Budget | None
    burn: Mapping[str, float | None]
    tiers: tuple[TierFigures, ...]
    status: SloStatus
    exhaustion_s: float | None

    @property
    def total(self) -> int:
        return self.good + self.bad


@dataclass(frozen=True)
class Sums:
    """The judged buckets of one window ending at T: their good and bad events, and how many
    buckets were judged (a window with none judged has all three 0)."""

    good: int = 0
    bad: int = 0
    buckets: int = 0

    @property
    def total(self) -> int:
        return self.good + self.bad


def lengths(params: SloParams) -> tuple[timedelta, ...]:
    """The windows the figures sum over, ending at T: every burn window, and the period."""
    return tuple(sorted({*WINDOWS.values(), params.period}))


def window_sums(
    params: SloParams, buckets: Iterable[Bucket], at: datetime
) -> dict[timedelta, Sums]:
    """Per window of `lengths`, the sums of the judged `buckets` inside `[at - length, at)`.

    ValueError when `at` or a bucket's start is not a bucket boundary, or two buckets start at
    the same time (what the ledger's reads in SQL rule out by construction).
    """
    if not params.aligned(at):
        raise ValueError(f"{at.isoformat()} is not a bucket boundary")
    seen: set[datetime] = set()
    found = {length: [0, 0, 0] for length in lengths(params)}
    for bucket in buckets:
        if not params.aligned(bucket.start):
            raise ValueError(f"bucket {bucket.start.isoformat()} is not a bucket boundary")
        if bucket.start in seen:
            raise ValueError(f"bucket {bucket.start.isoformat()} is given twice")
        seen.add(bucket.start)
        for length, sums in found.items():
            if at - length <= bucket.start < at:
                sums[0] += bucket.good
                sums[1] += bucket.bad
                sums[2] += 1
    return {length: Sums(*sums) for length, sums in found.items()}


def _burn(sums: Sums, error_share: Fraction) -> Fraction | None:
    """(bad / total) / (1 - objective) over a window; None when it holds no event."""
    if sums.total == 0:
        return None
    return Fraction(sums.bad, sums.total) / error_share


def _float(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


def figures(params: SloParams, buckets: Iterable[Bucket], at: datetime) -> SloFigures:
    """The SLO's figures at `at` (a bucket boundary) over the judged `buckets`.

    Buckets outside a window do not count in it; a bucket not given is not judged (it counts
    against coverage, not as zero events). ValueError when `at` or a bucket's start is not a
    bucket boundary, or two buckets start at the same time.
    """
    return figures_of(params, window_sums(params, buckets, at), at)


def figures_of(params: SloParams, sums: Mapping[timedelta, Sums], at: datetime) -> SloFigures:
    """The SLO's figures at `at` from the sums of its judged buckets over each of its windows
    (`lengths`; a window missing holds no judged bucket), as `figures` makes them."""
    if not params.aligned(at):
        raise ValueError(f"{at.isoformat()} is not a bucket boundary")

    def within(length: timedelta) -> Sums:
        return sums.get(length, Sums())

    share = params.error_share
    burns = {label: _burn(within(length), share) for label, length in WINDOWS.items()}
    in_period = within(params.period)
    good, bad = in_period.good, in_period.bad
    budget = None
    remaining: Fraction | None = None
    allowed = share * (good + bad)
    if good + bad:
        remaining = 1 - bad / allowed
        budget = Budget(allowed=float(allowed), consumed=bad, remaining=float(remaining))
    tiers = tuple(_tier(params, tier, burns, within(tier.long)) for tier in TIERS)
    status = _status(remaining, allowed)
    return SloFigures(
        at=at,
        good=good,
        bad=bad,
        coverage=in_period.buckets / (params.period // params.bucket),
        budget=budget,
        burn={label: _float(burn) for label, burn in burns.items()},
        tiers=tiers,
        status=status,
        exhaustion_s=_exhaustion(params, status, remaining, burns[format_duration(6 * _HOUR)]),
    )


def _tier(
    params: SloParams,
    tier: Tier,
    burns: Mapping[str, Fraction | None],
    long_sums: Sums,
) -> TierFigures:
    """A tier's state: firing when both windows burn above the factor; else no_data when either
    window holds no event; else insufficient_data when the long one holds fewer than
    min_events; else ok (docs/spec.md section 11, in that order)."""
    factor = params.factor(tier)
    long, short = burns[format_duration(tier.long)], burns[format_duration(tier.short)]
    events = long_sums.total
    if long is not None and short is not None and long > factor and short > factor:
        state = TierState.FIRING
    elif long is None or short is None:
        state = TierState.NO_DATA
    elif events < params.min_events:
        state = TierState.INSUFFICIENT_DATA
    else:
        state = TierState.OK
    return TierFigures(tier, float(factor), _float(long), _float(short), events, state)


def _status(remaining: Fraction | None, allowed: Fraction) -> SloStatus:
    if remaining is None:
        return SloStatus.NO_DATA
    if remaining <= 0:
        return SloStatus.EXHAUSTED
    if allowed < 1:
        return SloStatus.TOO_FEW_EVENTS
    return SloStatus.OK


def _exhaustion(
    params: SloParams, status: SloStatus, remaining: Fraction | None, burn_6h: Fraction | None
) -> float | None:
    """Seconds until the budget is spent at the 6h burn: remaining x period / burn(6h); 0 when
    exhausted, None when the 6h window is not burning (null or 0)."""
    if status is SloStatus.EXHAUSTED:
        return 0.0
    if remaining is None or not burn_6h:
        return None
    return float(remaining * (params.period // _SECOND) / burn_6h)
