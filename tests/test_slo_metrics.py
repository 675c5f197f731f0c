"""The SLO series of `/metrics`, read back with prometheus_client's own parser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

from prometheus_client.parser import text_string_to_metric_families

from checks.slo.budget import Bucket, SloParams, figures
from watchdog.daemon.metrics import Metrics

AT = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
BUCKET = timedelta(minutes=5)
PARAMS = SloParams(objective=Fraction(99, 100), period=timedelta(days=30), bucket=BUCKET)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics: Metrics) -> Samples:
    """Every sample of the exposition, by (name, sorted labels)."""
    body, _ = metrics.exposition(None)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def slo_samples(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def hour(at: datetime, good: int, bad: int) -> list[Bucket]:
    """The last hour before `at`, every bucket with `good` and `bad` events."""
    return [Bucket(at - (i + 1) * BUCKET, good, bad) for i in range(12)]


def test_budget_remaining_is_the_share_left() -> None:
    """`slo_budget_remaining{slo}` is the figures' remaining budget."""
    metrics = Metrics()
    metrics.record_slo("observe_success", figures(PARAMS, hour(AT, 99, 1), AT))
    budget = slo_samples(scrape(metrics), "memory_watchdog_slo_budget_remaining")
    assert budget == {(("slo", "observe_success"),): 0.0}


def test_burn_rate_per_window() -> None:
    """`slo_burn_rate{slo,window}` has one series per window holding events."""
    metrics = Metrics()
    metrics.record_slo("observe_success", figures(PARAMS, hour(AT, 98, 2), AT))
    burn = slo_samples(scrape(metrics), "memory_watchdog_slo_burn_rate")
    assert burn[(("slo", "observe_success"), ("window", "5m"))] == 2.0
    assert burn[(("slo", "observe_success"), ("window", "3d"))] == 2.0
    assert len(burn) == 7


def test_a_null_burn_removes_its_series_rather_than_reading_zero() -> None:
    """A window with no event drops its series (and the budget's), never shows 0."""
    metrics = Metrics()
    metrics.record_slo("observe_success", figures(PARAMS, hour(AT, 98, 2), AT))
    later = AT + timedelta(hours=4)  # the last hour's buckets now lie 3-4h back
    metrics.record_slo("observe_success", figures(PARAMS, hour(AT, 98, 2), later))
    burn = slo_samples(scrape(metrics), "memory_watchdog_slo_burn_rate")
    windows = {dict(labels)["window"] for labels in burn}
    assert windows == {"6h", "1d", "3d"}
    metrics.record_slo("observe_success", figures(PARAMS, [], later))
    samples = scrape(metrics)
    assert slo_samples(samples, "memory_watchdog_slo_burn_rate") == {}
    assert slo_samples(samples, "memory_watchdog_slo_budget_remaining") == {}


def test_events_total_counts_the_buckets_judged() -> None:
    """`slo_events_total{slo,outcome}` adds the good and bad events of each judged bucket once."""
    metrics = Metrics()
    first = hour(AT, 98, 2)
    metrics.record_slo("observe_success", figures(PARAMS, first, AT), first)
    newer = [Bucket(AT, 10, 1)]
    metrics.record_slo("observe_success", figures(PARAMS, [*first, *newer], AT + BUCKET), newer)
    events = slo_samples(scrape(metrics), "memory_watchdog_slo_events_total")
    assert events == {
        (("outcome", "good"), ("slo", "observe_success")): 12 * 98 + 10,
        (("outcome", "bad"), ("slo", "observe_success")): 12 * 2 + 1,
    }
