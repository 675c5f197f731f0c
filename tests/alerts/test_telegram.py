"""The Telegram receiver against a stand-in that enforces the Bot API's rules for HTML.

Hostile check ids, sources, agent names and evidence ids (tags Telegram does
not know, unclosed ones, entities, ampersands, control characters, emoji)
must never make Telegram refuse a message ("can't parse entities"), and must
show as written; a message holds at most 4,096 characters after its entities
are parsed, the alerts beyond cut with a count. The failure contract (429
with `parameters.retry_after`, 5xx, revoked token, the token never shown) is
the notifier contract suite's (tests/alerts/test_receiver_contract.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.base import AlertFacts, Deadline, DeliveryError, Failure
from alerts.facts import alert_facts
from alerts.lifecycle import Cause, Kind, Notification
from alerts.notifiers import TelegramNotifier, build_notifiers
from alerts.pipeline import process
from alerts.receivers.telegram import MAX_TEXT, telegram_html, utf16_length
from alerts.testing import FakeTimer
from checks.base import Status
from tests.alerts.conftest import T0, H, make_settings, report, result
from tests.alerts.receiver_rigs import firing_message
from tests.alerts.telegram_standin import (
    BOT_TOKEN,
    CHAT_ID,
    TelegramStandIn,
    parse_html,
)
from watchdog.core.store import Store
from watchdog.core.text import printable

# What a check id, an agent name or an id in the data could hold to break Telegram's HTML.
HOSTILE = (
    "<b>bold</i>",
    "</code><a href='https://evil.example'>click</a>",
    "<tg-spoiler>",
    "a & b &amp; &nbsp; &#x1F600; &bogus;",
    "1 < 2 > 0",
    "\"quoted\" 'single'",
    "agente <script>alert(1)</script>",
    "\x1b[31mred\x1b[0m\rhidden\nline",
    "emoji \U0001f525\U0001f9e0 and ZWJ \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "<" * 50 + "&" * 50,
)


@pytest.fixture
def tg() -> Iterator[TelegramStandIn]:
    standin = TelegramStandIn()
    yield standin
    standin.close()


def receiver(tg: TelegramStandIn) -> TelegramNotifier:
    return TelegramNotifier(
        bot_token=BOT_TOKEN,
        chat_id=CHAT_ID,
        api_url=tg.api_url,
        name="telegram.ops",
        backoff_base=0.01,
    )


def facts(check_id: str, *, source: str = "joelclaw.otel_events", **fields: object) -> AlertFacts:
    """One firing alert's facts, `check_id` (and anything else) as given, unvalidated."""
    n = Notification(
        Kind.FIRE,
        source,
        check_id,
        Cause.BREACHED,
        result("recall_coverage", Status.BREACHED),
        report(T0, {}).window,
        T0,
    )
    return replace(alert_facts(n), **fields)  # type: ignore[arg-type]


def deadline() -> Deadline:
    return Deadline(timedelta(seconds=30), FakeTimer())


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_check_ids_sources_and_agent_names_are_shown_as_written(
    tg: TelegramStandIn, hostile: str
) -> None:
    """Telegram takes the HTML on the first request and shows every hostile value as written."""
    alert = facts(
        hostile,
        source=hostile,
        summary=f"2 deviation events by {hostile} break the contract",
        evidence_kind="events",
        evidence=(hostile, "ev-2"),
    )
    message = replace(firing_message(), alerts=(alert,))
    receiver(tg).send(message, deadline())
    [request] = tg.requests  # no plain-text fallback was needed
    assert request.body["parse_mode"] == "HTML" and request.delivered
    [shown] = tg.messages()
    assert printable(hostile, 100) in shown
    assert f"by {printable(hostile, 600)} break" in shown


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(max_size=300), st.text(max_size=300), st.lists(st.text(), max_size=5)),
        min_size=1,
        max_size=30,
    ),
    st.text(max_size=300),
)
def test_any_text_makes_html_telegram_parses_within_its_limit(
    alerts: list[tuple[str, str, list[str]]], source: str
) -> None:
    """Whatever the values, the HTML parses by Telegram's rules and fits in 4,096 characters."""
    built = tuple(
        facts(check_id, source=source, summary=summary, evidence_kind="events", evidence=tuple(ids))
        for check_id, summary, ids in alerts
    )
    text = telegram_html(built, link="https://watchdog.example/reports/20261128T040000Z")
    shown = parse_html(text)  # raises as Telegram refuses: "can't parse entities"
    assert 0 < utf16_length(shown) <= MAX_TEXT


def test_a_long_message_is_cut_saying_how_many_more_are_in_the_report(tg: TelegramStandIn) -> None:
    """40 alerts with long summaries: as many as fit, then "... (N more in the report)"."""
    alerts = tuple(
        facts(f"check_{i:02d}", summary=f"summary {i} " + "\u00e9\U0001f525" * 120)
        for i in range(40)
    )
    message = replace(firing_message(), alerts=alerts)
    receiver(tg).send(message, deadline())
    [shown] = tg.messages()
    assert utf16_length(shown) <= MAX_TEXT
    kept = len(re.findall(r"FIRING check_\d\d", shown))
    assert 0 < kept < 40
    assert f"… ({40 - kept} more in the report)" in shown


def test_an_unknown_chat_is_permanent_naming_chat_id(tg: TelegramStandIn) -> None:
    """'chat not found' keeps the messages (permanent) and says which key to fix."""
    wrong = TelegramNotifier(
        bot_token=BOT_TOKEN, chat_id="-100999", api_url=tg.api_url, name="telegram.ops"
    )
    with pytest.raises(DeliveryError) as caught:
        wrong.send(firing_message(), deadline())
    assert caught.value.failure is Failure.PERMANENT
    assert "chat not found" in caught.value.problem
    assert "check alerts.telegram.ops.chat_id" in caught.value.problem
    assert len(tg.requests) == 1


def test_the_pipeline_sends_fire_and_resolve_to_telegram(store: Store, tg: TelegramStandIn) -> None:
    """Configured from [alerts.telegram.ops]: a breach and its resolve, in Telegram's HTML."""
    settings = make_settings(
        {
            "alerts": {
                "telegram": {
                    "ops": {"bot_token": BOT_TOKEN, "chat_id": int(CHAT_ID), "api_url": tg.api_url}
                }
            },
            "report": {"base_url": "https://watchdog.example"},
        }
    )
    for hours, status in ((0, Status.BREACHED), (4, Status.OK)):
        process(
            store,
            settings,
            report(T0 + hours * H, {"recall_coverage": status}),
            now=T0 + hours * H,
            notifiers=build_notifiers(settings),
            timer=FakeTimer(),
        )
    fired, resolved = tg.messages()
    assert "FIRING recall_coverage [critical]: recall_coverage breached." in fired
    assert "Sessions: s-1, s-2, s-3." in fired and "The window's report" in fired
    assert "RESOLVED recall_coverage" in resolved
    assert '<a href="https://watchdog.example/reports/20261128T040000Z">' in tg.sent_html()[0]


def test_evidence_of_a_no_data_alert_is_worded_as_such(tg: TelegramStandIn) -> None:
    """An alert fired for no data says NO DATA, an error ERROR, never FIRING."""
    alerts = (
        facts("recall_injection", cause="no_data", headline="recall_injection has no data"),
        facts("circuit_breaker", cause="error", headline="the watchdog could not evaluate it"),
    )
    receiver(tg).send(replace(firing_message(), alerts=alerts), deadline())
    [shown] = tg.messages()
    assert "NO DATA recall_injection" in shown and "ERROR circuit_breaker" in shown
    assert "FIRING" not in shown.replace("firing", "")
