"""The SLO alerts (`<name>:page`, `<name>:ticket`) through the real pipeline on chdb."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from alerts.base import AlertFacts
from alerts.facts import SLO_KIND, identity_labels
from alerts.pipeline import ProcessOutcome
from alerts.receivers.alertmanager import alert_labels
from alerts.slo import SloJudgement, process_slos
from alerts.state import load_alerts
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import SloSpec
from checks.builtin import configured_checks
from checks.slo.budget import Alert, Bucket, figures
from checks.slo.specs import slo_specs
from tests.alerts.conftest import T0, make_settings
from watchdog.core.errors import ConfigError
from watchdog.core.settings import Settings
from watchdog.core.store import Store

BUCKET = timedelta(minutes=5)
PAGE, TICKET = "observe_success:page", "observe_success:ticket"


def spec(settings: Settings, name: str = "observe_success") -> SloSpec:
    found = {s.name: s for s in slo_specs(settings, configured_checks(settings))}
    return found[name]


def steady(at: datetime, span: timedelta, good: int, bad: int) -> list[Bucket]:
    """Every bucket of `[at - span, at)` with `good` and `bad` events."""
    return [Bucket(at - (i + 1) * BUCKET, good, bad) for i in range(span // BUCKET)]


def fast_burst(at: datetime) -> list[Bucket]:
    """Three clean days, then an hour at half failures: page-fast fires, the tickets do not."""
    burst = {b.start for b in steady(at, timedelta(hours=1), 0, 0)}
    return [
        Bucket(b.start, 50, 50) if b.start in burst else b
        for b in steady(at, timedelta(days=3), 100, 0)
    ]


def judge(
    store: Store,
    settings: Settings,
    at: datetime,
    buckets: Sequence[Bucket],
    *notifiers: RecordingNotifier,
    bad_events: Sequence[str] = (),
) -> ProcessOutcome:
    slo = spec(settings)
    judgement = SloJudgement(
        slo, figures(slo.params, buckets, at), {Alert.PAGE: bad_events, Alert.TICKET: bad_events}
    )
    outcome = process_slos(
        store,
        settings,
        [judgement],
        now=at,
        notifiers={n.name: n for n in notifiers},
        timer=FakeTimer(),
    )
    assert outcome is not None
    return outcome


def kinds(outcome: ProcessOutcome) -> list[tuple[str, str]]:
    return [(n.kind.value, n.check_id) for n in outcome.notifications]


def test_a_fast_burn_fires_the_page_alert_and_not_the_ticket(store: Store) -> None:
    """An hour burning 50x fires `<name>:page` (critical); the ticket tiers stay ok."""
    settings, chat = make_settings(), RecordingNotifier()
    outcome = judge(store, settings, T0, fast_burst(T0), chat)
    assert kinds(outcome) == [("fire", PAGE)]
    assert outcome.firing == (PAGE,)
    assert [(a.check_id, a.severity) for a in chat.sent[0].alerts] == [(PAGE, "critical")]


def test_the_message_says_burns_against_factors_budget_and_exhaustion(store: Store) -> None:
    """The text gives each tier's burns against its factor, the budget left, the exhaustion."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    text = chat.sent[0].plain
    assert "page-fast: burn 50 (1h), 50 (5m) vs 14.4, firing" in text
    assert "page-slow: burn 8.33 (6h), 50 (30m) vs 6, firing" in text
    assert "budget over 30d: 30.6% left" in text
    assert "exhausted in" in text and "at the 6h rate" in text


def test_the_message_names_bad_events_the_ledger_gives(store: Store) -> None:
    """Bad event ids the ledger names are the alert's evidence (ids only)."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat, bad_events=["ev-1", "ev-2"])
    assert chat.sent[0].alerts[0].evidence == ("ev-1", "ev-2")
    assert "ev-1" in chat.sent[0].plain


def test_slo_alerts_carry_the_slo_labels(store: Store) -> None:
    """alertname is the SLO, slo_tier page or ticket, kind slo_burn, with severity and source."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    facts = chat.sent[0].alerts[0]
    assert facts.check_kind == SLO_KIND
    assert identity_labels(facts) == {
        "alertname": "observe_success",
        "slo_tier": "page",
        "kind": "slo_burn",
        "severity": "critical",
        "source": settings.source.display_name,
    }
    assert alert_labels(facts)["alertname"] == "observe_success"


def test_check_alerts_keep_their_labels() -> None:
    """A check's alert is labelled by its check id, with no slo_tier."""
    facts = AlertFacts.from_json(
        {
            **dict.fromkeys(("key", "source", "cause", "headline", "summary"), "x"),
            "status": "firing",
            "kind": "fire",
            **dict.fromkeys(("value", "target", "ends_at"), ""),
            **dict.fromkeys(
                ("starts_at", "at", "window_start", "window_end"), "2026-11-28T04:00:00Z"
            ),
            "check_id": "recall_coverage",
            "severity": "critical",
            "check_kind": "coverage",
        }
    )
    assert identity_labels(facts) == {
        "alertname": "recall_coverage",
        "severity": "critical",
        "source": "x",
    }


def test_a_burn_still_firing_repeats_after_repeat_interval(store: Store) -> None:
    """Firing bucket after bucket, the page alert is reminded once repeat_interval has passed."""
    settings, chat = make_settings({"alerts": {"repeat_interval": "1h"}}), RecordingNotifier()
    sent = []
    for i in range(13):
        at = T0 + i * BUCKET
        sent.append(kinds(judge(store, settings, at, fast_burst(at), chat)))
    assert sent[0] == [("fire", PAGE)]
    assert sent[1:12] == [[]] * 11
    assert sent[12] == [("repeat", PAGE)]


def test_the_page_alert_resolves_when_all_its_tiers_are_ok(store: Store) -> None:
    """Clean buckets again: the page alert resolves once, then says nothing."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    later = T0 + timedelta(days=1)
    clean = steady(later, timedelta(days=3), 100, 0)
    assert kinds(judge(store, settings, later, clean, chat)) == [("resolve", PAGE)]
    assert kinds(judge(store, settings, later + BUCKET, clean, chat)) == []
    assert len(chat.sent) == 2


def test_no_data_keeps_the_alert_firing(store: Store) -> None:
    """Buckets with no event make every tier no_data: the page alert keeps firing, silently."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    outcome = judge(store, settings, T0 + 12 * timedelta(hours=1), [], chat)
    assert kinds(outcome) == [] and outcome.firing == (PAGE,)


def test_too_few_events_keep_the_alert_firing(store: Store) -> None:
    """A long window under min_events is insufficient_data: the state stays as it is."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    later = T0 + 12 * timedelta(hours=1)
    outcome = judge(store, settings, later, [Bucket(later - BUCKET, 3, 0)], chat)
    assert kinds(outcome) == [] and outcome.firing == (PAGE,)


def test_a_firing_page_alert_holds_its_ticket_alert(store: Store) -> None:
    """Both firing: the page is sent, the ticket held; once the page resolves, the ticket is
    announced."""
    settings, chat = make_settings(), RecordingNotifier()
    heavy = judge(store, settings, T0, steady(T0, timedelta(days=3), 80, 20), chat)
    assert kinds(heavy) == [("fire", PAGE)]
    assert heavy.held == (TICKET,) and heavy.firing == (PAGE, TICKET)
    later = T0 + timedelta(days=3)
    slow = judge(store, settings, later, steady(later, timedelta(days=3), 95, 5), chat)
    assert sorted(kinds(slow)) == [("fire", TICKET), ("resolve", PAGE)]


def test_a_restart_sends_nothing_twice(store: Store) -> None:
    """Judging the same bucket again (a restarted daemon) and the next one sends nothing new."""
    settings, chat = make_settings(), RecordingNotifier()
    judge(store, settings, T0, fast_burst(T0), chat)
    again = judge(store, settings, T0, fast_burst(T0), RecordingNotifier())
    assert again.stale and kinds(again) == []
    fresh = RecordingNotifier()
    judge(store, settings, T0 + BUCKET, fast_burst(T0 + BUCKET), fresh)
    assert fresh.sent == [] and len(chat.sent) == 1
    assert load_alerts(store, settings, settings.source.display_name)[PAGE].firing


def test_a_route_may_name_an_slo_alert(store: Store) -> None:
    """`[[alerts.routes]] checks = ["<slo>:page"]` sends the page alert to its receiver only."""
    settings = make_settings(
        {
            "alerts": {
                "stdout": {"enabled": True},
                "routes": [{"checks": [PAGE], "receivers": ["stdout"]}],
            }
        }
    )
    oncall, other = RecordingNotifier("stdout"), RecordingNotifier("other")
    judge(store, settings, T0, fast_burst(T0), oncall, other)
    assert len(oncall.sent) == 1 and other.sent == []


def test_a_route_naming_an_unknown_slo_alert_is_refused() -> None:
    """A route naming `nope:page` (no such SLO) is a config error listing the SLO alerts."""
    with pytest.raises(ConfigError, match=r"alerts\.routes\[0\]\.checks.*observe_success:page"):
        make_settings(
            {
                "alerts": {
                    "stdout": {"enabled": True},
                    "routes": [{"checks": ["nope:page"], "receivers": ["stdout"]}],
                }
            }
        )
