"""An SLO's figures from its buckets (docs/spec.md section 11): burn per window, budget,
coverage, the four tiers, status and time to exhaustion, by exact examples and properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.slo.budget import (
    TIERS,
    WINDOWS,
    Bucket,
    SloParams,
    SloStatus,
    TierState,
    figures,
)

AT = datetime(2026, 11, 28, tzinfo=UTC)
M5 = timedelta(minutes=5)
DAY = timedelta(days=1)
P99 = SloParams(objective=Fraction(99, 100), period=30 * DAY, bucket=M5)


def spread(length: timedelta, good: int, bad: int, at: datetime = AT) -> list[Bucket]:
    """`length` before `at` in 5-minute buckets, each holding `good` and `bad` events."""
    return [Bucket(at - (i + 1) * M5, good, bad) for i in range(length // M5)]


def tier_state(found: object, name: str) -> TierState:
    tiers = {t.tier.name: t for t in found.tiers}  # type: ignore[attr-defined]
    return tiers[name].state


def test_the_factors_over_30_days_are_those_of_the_spec_table() -> None:
    """page-fast 14.4, page-slow 6, ticket-fast 3, ticket-slow 1 over a 30-day period."""
    assert [(t.name, P99.factor(t)) for t in TIERS] == [
        ("page-fast", Fraction(72, 5)),
        ("page-slow", 6),
        ("ticket-fast", 3),
        ("ticket-slow", 1),
    ]


def test_the_factors_scale_with_the_period() -> None:
    """factor = budget share x period / long window: over 7 days, 3.36, 1.4, 0.7 and 7/30."""
    week = SloParams(objective=Fraction(99, 100), period=7 * DAY, bucket=M5)
    assert [week.factor(t) for t in TIERS] == [
        Fraction(336, 100),
        Fraction(14, 10),
        Fraction(7, 10),
        Fraction(7, 30),
    ]


def test_the_tiers_windows_are_the_spec_tables() -> None:
    """Long/short: 1h/5m, 6h/30m, 1d/2h, 3d/6h; pages then tickets; burn windows 5m to 3d."""
    shown = [(t.name, t.alert.value, t.long, t.short) for t in TIERS]
    assert shown == [
        ("page-fast", "page", timedelta(hours=1), timedelta(minutes=5)),
        ("page-slow", "page", timedelta(hours=6), timedelta(minutes=30)),
        ("ticket-fast", "ticket", DAY, timedelta(hours=2)),
        ("ticket-slow", "ticket", 3 * DAY, timedelta(hours=6)),
    ]
    assert list(WINDOWS) == ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]


def test_burn_is_the_bad_share_over_the_allowed_share() -> None:
    """2% bad against a 99% objective burns at 2 in every window that holds them."""
    found = figures(P99, spread(3 * DAY, 98, 2), AT)
    assert found.burn == dict.fromkeys(WINDOWS, 2.0)


def test_a_window_with_no_event_has_a_null_burn_never_zero() -> None:
    """Judged buckets holding no event give burn null, not 0, in every window they cover."""
    found = figures(P99, spread(3 * DAY, 0, 0), AT)
    assert found.burn == dict.fromkeys(WINDOWS, None)


def test_a_window_counts_only_the_buckets_inside_it() -> None:
    """A bad bucket 2h ago is in the 6h window, not in the 1h one."""
    buckets = [Bucket(AT - M5, 100, 0), Bucket(AT - timedelta(hours=2), 0, 100)]
    found = figures(P99, buckets, AT)
    assert (found.burn["1h"], found.burn["6h"]) == (0.0, 50.0)


def test_the_budget_is_allowed_consumed_and_the_share_remaining() -> None:
    """10000 events at 99%: 100 bad allowed; 50 bad leaves half the budget."""
    found = figures(P99, [Bucket(AT - M5, 9950, 50)], AT)
    assert found.budget is not None
    assert (found.budget.allowed, found.budget.consumed, found.budget.remaining) == pytest.approx(
        (100, 50, 0.5)
    )
    assert (found.good, found.bad, found.total, found.status) == (9950, 50, 10000, SloStatus.OK)


def test_an_overspent_budget_is_negative_and_exhausted() -> None:
    """150 bad of 100 allowed: remaining -0.5 (unclamped), exhausted, exhaustion 0 seconds."""
    found = figures(P99, [Bucket(AT - M5, 9850, 150)], AT)
    assert found.budget is not None and found.budget.remaining == pytest.approx(-0.5)
    assert (found.status, found.exhaustion_s) == (SloStatus.EXHAUSTED, 0.0)


def test_a_budget_spent_exactly_is_exhausted() -> None:
    """remaining 0 is exhausted (remaining <= 0)."""
    found = figures(P99, [Bucket(AT - M5, 9900, 100)], AT)
    assert found.status is SloStatus.EXHAUSTED


def test_too_few_events_when_one_bad_event_would_overspend() -> None:
    """50 good events at 99% allow 0.5 bad: too_few_events, though nothing failed."""
    found = figures(P99, [Bucket(AT - M5, 50, 0)], AT)
    assert found.status is SloStatus.TOO_FEW_EVENTS


def test_a_period_with_no_event_is_no_data_never_full_budget() -> None:
    """No event in the period: status no_data, budget null, every burn null, tiers no_data."""
    found = figures(P99, spread(DAY, 0, 0), AT)
    assert (found.status, found.budget, found.exhaustion_s) == (SloStatus.NO_DATA, None, None)
    assert {t.state for t in found.tiers} == {TierState.NO_DATA}


def test_coverage_is_the_share_of_the_periods_buckets_judged() -> None:
    """15 of a day's 288 buckets judged, empty ones included; buckets before the period not."""
    week = SloParams(objective=Fraction(99, 100), period=DAY, bucket=M5)
    buckets = [*spread(timedelta(minutes=75), 0, 0), Bucket(AT - 2 * DAY, 5, 5)]
    assert figures(week, buckets, AT).coverage == 15 / 288


def test_buckets_at_or_after_t_are_not_counted() -> None:
    """Only `[T - w, T)`: a bucket starting at T is the future."""
    found = figures(P99, [Bucket(AT, 0, 100)], AT)
    assert (found.total, found.burn["5m"]) == (0, None)


def test_a_tier_fires_when_both_windows_burn_above_its_factor() -> None:
    """14.5% bad at 99% in every bucket of the hour burns at 14.5 > 14.4: page-fast fires."""
    found = figures(P99, spread(timedelta(hours=1), 855, 145), AT)
    assert tier_state(found, "page-fast") is TierState.FIRING


def test_a_burn_equal_to_the_factor_does_not_fire() -> None:
    """14.4% bad at 99% burns at exactly 14.4: not above the factor, so ok (exact arithmetic)."""
    found = figures(P99, spread(timedelta(hours=1), 856, 144), AT)
    assert tier_state(found, "page-fast") is TierState.OK


def test_a_fast_burn_only_in_the_long_window_does_not_fire() -> None:
    """A burst that ended before the short window: the long window burns, the short does not."""
    buckets = [*spread(timedelta(minutes=5), 1000, 0), Bucket(AT - 2 * M5, 0, 1000)]
    found = figures(P99, buckets, AT)
    assert found.burn["1h"] is not None and found.burn["1h"] > 14.4
    assert tier_state(found, "page-fast") is TierState.OK


def test_a_tier_with_a_null_window_is_no_data() -> None:
    """Events in the last hour but none in the last 5 minutes: page-fast is no_data."""
    found = figures(P99, [Bucket(AT - 6 * M5, 100, 0)], AT)
    assert tier_state(found, "page-fast") is TierState.NO_DATA


def test_a_tier_with_fewer_than_min_events_in_its_long_window_is_insufficient_data() -> None:
    """9 events in the hour, min_events 10: page-fast is insufficient_data, not ok."""
    found = figures(P99, [Bucket(AT - M5, 9, 0)], AT)
    assert tier_state(found, "page-fast") is TierState.INSUFFICIENT_DATA


def test_firing_comes_before_insufficient_data() -> None:
    """The spec's order: a tier burning above its factor in both windows fires, few events or not."""
    found = figures(P99, [Bucket(AT - M5, 0, 3)], AT)
    assert tier_state(found, "page-fast") is TierState.FIRING


def test_exhaustion_is_the_remaining_budget_at_the_6h_burn() -> None:
    """Half the budget left, burning at 2 over 6h, 30-day period: 7.5 days to exhaustion."""
    six_hours = spread(timedelta(hours=6), 98, 2)  # 7200 events, 144 bad: burn 2
    earlier = Bucket(AT - 10 * DAY, 21_600, 0)  # 28800 in the period: 288 allowed, half spent
    found = figures(P99, [earlier, *six_hours], AT)
    assert found.burn["6h"] == pytest.approx(2.0)
    assert found.budget is not None and found.budget.remaining == pytest.approx(0.5)
    assert found.exhaustion_s == pytest.approx(7.5 * 86400)


def test_no_exhaustion_when_the_6h_window_does_not_burn() -> None:
    """burn(6h) 0 (all good) or null (no event): exhaustion_s null."""
    all_good = figures(P99, spread(timedelta(hours=6), 100, 0), AT)
    quiet = figures(P99, [Bucket(AT - DAY, 100, 1)], AT)
    assert (all_good.exhaustion_s, quiet.exhaustion_s) == (None, None)


def test_a_time_that_is_no_bucket_boundary_is_refused() -> None:
    """Figures are at bucket boundaries, aligned to the Unix epoch."""
    with pytest.raises(ValueError, match="not a bucket boundary"):
        figures(P99, [], AT + timedelta(minutes=1))


def test_a_bucket_given_twice_is_refused() -> None:
    """A ledger holds each bucket once."""
    with pytest.raises(ValueError, match="given twice"):
        figures(P99, [Bucket(AT - M5, 1, 0), Bucket(AT - M5, 0, 1)], AT)


def test_a_tier_that_can_never_fire_is_known() -> None:
    """At 90% the highest burn is 10: page-fast (14.4) can never fire, page-slow (6) can."""
    ninety = SloParams(objective=Fraction(9, 10), period=30 * DAY, bucket=M5)
    assert [ninety.can_fire(t) for t in TIERS] == [False, True, True, True]


# Properties: any objective, period and bucket, any judged buckets within 3 days.

objectives = st.integers(1, 9999).map(lambda n: Fraction(n, 10_000))
params_st = st.builds(
    SloParams,
    objective=objectives,
    period=st.integers(1, 90).map(lambda d: d * DAY),
    bucket=st.sampled_from([timedelta(minutes=1), M5]),
    min_events=st.integers(0, 50),
)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[SloParams, list[Bucket]]:
    params = draw(params_st)
    reach = max(params.period, 3 * DAY) // params.bucket
    offsets = draw(st.sets(st.integers(1, reach), max_size=40))
    counts = st.tuples(st.integers(0, 1000), st.integers(0, 50))
    buckets = [Bucket(AT - n * params.bucket, *draw(counts)) for n in sorted(offsets)]
    return params, buckets


def _in(buckets: list[Bucket], length: timedelta) -> tuple[int, int]:
    inside = [b for b in buckets if b.start >= AT - length]
    return sum(b.good for b in inside), sum(b.bad for b in inside)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_every_burn_is_its_windows_bad_share_over_the_allowed_share(
    world: tuple[SloParams, list[Bucket]],
) -> None:
    """burn(w) = (bad/total)/(1 - objective) over [T - w, T); null exactly when total is 0."""
    params, buckets = world
    found = figures(params, buckets, AT)
    for label, length in WINDOWS.items():
        good, bad = _in(buckets, length)
        expected = (
            None if good + bad == 0 else float(Fraction(bad, good + bad) / (1 - params.objective))
        )
        assert found.burn[label] == expected


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_the_budget_and_status_follow_the_periods_counts(
    world: tuple[SloParams, list[Bucket]],
) -> None:
    """allowed = (1-objective) x total, consumed = bad, remaining = 1 - bad/allowed; status
    no_data, exhausted, too_few_events, ok in that order; coverage the judged share."""
    params, buckets = world
    found = figures(params, buckets, AT)
    good, bad = _in(buckets, params.period)
    assert (found.good, found.bad) == (good, bad)
    judged = sum(1 for b in buckets if b.start >= AT - params.period)
    assert found.coverage == judged / (params.period // params.bucket)
    if good + bad == 0:
        assert (found.budget, found.status, found.exhaustion_s) == (None, SloStatus.NO_DATA, None)
        return
    allowed = (1 - params.objective) * (good + bad)
    remaining = 1 - bad / allowed
    assert found.budget is not None
    assert (found.budget.allowed, found.budget.consumed) == (float(allowed), bad)
    assert found.budget.remaining == float(remaining)
    expected = (
        SloStatus.EXHAUSTED
        if remaining <= 0
        else SloStatus.TOO_FEW_EVENTS
        if allowed < 1
        else SloStatus.OK
    )
    assert found.status is expected
    if expected is SloStatus.EXHAUSTED:
        assert found.exhaustion_s == 0.0


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_every_tier_state_follows_its_two_windows(world: tuple[SloParams, list[Bucket]]) -> None:
    """firing iff both burns exceed the factor; else no_data if one is null; else
    insufficient_data below min_events in the long window; else ok."""
    params, buckets = world
    found = figures(params, buckets, AT)
    share = 1 - params.objective
    for tier in found.tiers:
        factor = params.factor(tier.tier)
        assert tier.factor == float(factor)
        burns = []
        for length in (tier.tier.long, tier.tier.short):
            good, bad = _in(buckets, length)
            burns.append(None if good + bad == 0 else Fraction(bad, good + bad) / share)
        long_good, long_bad = _in(buckets, tier.tier.long)
        assert tier.long_events == long_good + long_bad
        if all(b is not None and b > factor for b in burns):
            assert tier.state is TierState.FIRING
        elif None in burns:
            assert tier.state is TierState.NO_DATA
        elif long_good + long_bad < params.min_events:
            assert tier.state is TierState.INSUFFICIENT_DATA
        else:
            assert tier.state is TierState.OK


@settings(max_examples=200, deadline=None)
@given(worlds(), st.integers(1, 1000))
def test_more_good_events_never_raise_a_burn(
    world: tuple[SloParams, list[Bucket]], more: int
) -> None:
    """Adding good events to the newest bucket lowers or keeps every burn (never raises one)."""
    params, buckets = world
    before = figures(params, buckets, AT)
    newest = AT - params.bucket
    rest = [b for b in buckets if b.start != newest]
    old = next((b for b in buckets if b.start == newest), Bucket(newest, 0, 0))
    after = figures(params, [*rest, Bucket(newest, old.good + more, old.bad)], AT)
    for label in WINDOWS:
        b, a = before.burn[label], after.burn[label]
        assert a is not None
        assert b is None or a <= b
