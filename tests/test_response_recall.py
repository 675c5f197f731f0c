"""recall_before_response (SPEC sections 3-5): each rule at its ±1 ms edges, on the embedded engine.

A non-trivial human message of a real session obliges a recall of that
session in [message, deadline], the deadline being the session's first
agent response after the message, or message + recall_grace when that
comes sooner.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import timedelta

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from alerts.pipeline import process
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from checks.evidence import Evidence
from tests.builder import T0, H, M, S, Scenario, evaluate
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.telemetry import Telemetry
from watchdog.report.page import render_page
from watchdog.report.text import render_json, render_text
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H  # the window is [T0, T0 + 4h)
MS = timedelta(milliseconds=1)
ASKED = T0 + H
CHECK = "recall_before_response"


def test_recall_at_the_message_time_meets_it(store: Store) -> None:
    """A recall at the very millisecond of the message counts."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).recalls(ASKED).answers(ASKED + 10 * S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_recall_just_before_the_message_does_not_count(store: Store) -> None:
    """A recall 1 ms before the message answers an earlier question, not this one."""
    sc = Scenario()
    sc.session("s1").emits("memory.recall.started", ASKED - MS).asks(ASKED, id="m1").answers(
        ASKED + 10 * S
    )
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 1)
    assert replace(result.evidence, details=None) == Evidence(events=("m1",))


def test_recall_exactly_at_the_reply_meets_it(store: Store) -> None:
    """The deadline is inclusive: a recall at the reply's millisecond counts."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.started", ASKED + 30 * S).answers(
        ASKED + 30 * S
    )
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value) == (Status.OK, 0)


def test_reply_before_the_recall_breaches(store: Store) -> None:
    """A recall 1 ms after the reply comes too late: the agent answered without memory."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).answers(ASKED + 30 * S).emits(
        "memory.recall.started", ASKED + 30 * S + MS
    )
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_without_reply_a_recall_at_exactly_recall_grace_meets_it(store: Store) -> None:
    """No reply: the deadline is message + recall_grace, inclusive."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.started", ASKED + 5 * M)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_without_reply_a_recall_1ms_after_recall_grace_breaches(store: Store) -> None:
    """No reply and the recall lands 1 ms past recall_grace: unmet."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.started", ASKED + 5 * M + MS)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_a_reply_later_than_recall_grace_does_not_extend_it(store: Store) -> None:
    """A slow reply leaves the deadline at message + recall_grace."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.started", ASKED + 6 * M).answers(
        ASKED + 8 * M
    )
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_a_reply_at_the_message_own_time_is_not_its_answer(store: Store) -> None:
    """Only a response after the message (ts > the message's) closes it."""
    sc = Scenario()
    sc.session("s1").answers(ASKED).asks(ASKED).emits("memory.recall.started", ASKED + S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_only_the_sessions_own_reply_closes_the_obligation(store: Store) -> None:
    """Another session's response is not the answer to this message."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.started", ASKED + 2 * M)
    sc.session("s2").answers(ASKED + M)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


def test_any_recall_event_meets_it(store: Store) -> None:
    """Recall started, completed or failed: each is a recall event."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).emits("memory.recall.failed", ASKED + S).answers(ASKED + 2 * S)
    sc.session("s2").asks(ASKED).emits("memory.recall.completed", ASKED + S).answers(ASKED + 2 * S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 2)


def test_trivial_kinds_owe_no_recall(store: Store) -> None:
    """Greetings, acks and heartbeats create no obligation: nothing to judge."""
    sc = Scenario()
    session = sc.session("s1")
    for i, kind in enumerate(("greeting", "ack", "heartbeat")):
        session.asks(ASKED + i * M, kind=kind).answers(ASKED + i * M + S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.NO_DATA, None, 0)


def test_a_missing_kind_is_non_trivial(store: Store) -> None:
    """A message without the kind field is a question like any other."""
    sc = Scenario()
    sc.session("s1").asks(ASKED, kind="greeting").answers(ASKED + S)
    sc.session("s1").asks(ASKED + M, id="plain").answers(ASKED + M + S)
    sc.session("s1").asks(ASKED + 2 * M, kind="question").answers(ASKED + 2 * M + S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.value, result.sample_size) == (2, 2)
    assert (result.evidence.events or ())[0] == "plain"


def test_trivial_field_and_kinds_are_configurable(store: Store) -> None:
    """events.trivial_field and events.trivial_kinds name what is trivial."""
    sc = Scenario()
    sc.session("s1").emits("message.received", ASKED, meta={"type": "smalltalk"}).answers(ASKED + S)
    sc.session("s1").asks(ASKED + M, kind="greeting").answers(ASKED + M + S)
    config = {"events": {"trivial_field": "type", "trivial_kinds": ["smalltalk"]}}
    result = evaluate(store, sc, AT, config).checks[CHECK]
    assert (result.value, result.sample_size) == (1, 1)


def test_role_names_are_configurable(store: Store) -> None:
    """events.human_message and events.agent_response name the roles."""
    sc = Scenario()
    sc.session("s1").emits("chat.user", ASKED).emits("chat.bot", ASKED + S).emits(
        "memory.recall.started", ASKED + 2 * S
    )
    config = {"events": {"human_message": ["chat.user"], "agent_response": ["chat.bot"]}}
    result = evaluate(store, sc, AT, config).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 1)


def test_messages_without_a_real_session_are_not_judged(store: Store) -> None:
    """No session, or a placeholder one: the message owes nothing anyone can judge."""
    sc = Scenario()
    sc.event("message.received", ASKED)
    sc.event("message.received", ASKED, "gateway")
    sc.event("message.sent", ASKED + S, "gateway")
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.sample_size) == (Status.NO_DATA, 0)


def test_a_message_still_in_grace_waits_for_the_next_window(store: Store) -> None:
    """Unanswered and younger than recall_grace at `at`: not yet due."""
    sc = Scenario()
    sc.session("s1").asks(AT - 5 * M)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.sample_size) == (Status.NO_DATA, 0)


def test_a_reply_makes_the_obligation_due_before_grace_ends(store: Store) -> None:
    """Answered 1 ms before `at` without recall: due (and unmet) in this window."""
    sc = Scenario()
    sc.session("s1").asks(AT - M).answers(AT - MS)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 1)


def test_a_reply_at_or_after_at_does_not_exist_yet(store: Store) -> None:
    """A reply at `at` is in the future of this evaluation: the message waits."""
    sc = Scenario()
    sc.session("s1").asks(AT - M).answers(AT)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.sample_size) == (Status.NO_DATA, 0)


def test_an_obligation_due_before_the_window_was_judged_then(store: Store) -> None:
    """Answered 1 ms before the window starts: judged by the previous window, not this one."""
    sc = Scenario()
    sc.session("s1").asks(T0 - M).answers(T0 - MS)
    sc.session("s2").asks(T0 - M).answers(T0)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.value, result.sample_size) == (1, 1)
    assert replace(result.evidence, details=None) == Evidence(
        events=tuple(e.id for e in sc.events if e.session == "s2")[:1]
    )


def test_value_and_sample_count_messages_not_sessions(store: Store) -> None:
    """Two unmet messages of one session count two, of three judged."""
    sc = Scenario()
    s1 = sc.session("s1")
    s1.asks(ASKED, id="m1").answers(ASKED + S)
    s1.asks(ASKED + M, id="m2").recalls(ASKED + M + S).answers(ASKED + M + 5 * S)
    s1.asks(ASKED + 2 * M, id="m3").answers(ASKED + 2 * M + S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 2, 3)
    assert result.summary == "2 of 3 human messages had no recall before the response"


def test_evidence_lists_messages_oldest_first_each_once(store: Store) -> None:
    """Evidence: the unmet messages' event ids by ts; a duplicated row appears once."""
    sc = Scenario()
    late = sc.session("s2").asks(ASKED + M, id="late")
    late.answers(ASKED + M + S)
    sc.session("s1").asks(ASKED, id="early").answers(ASKED + S)
    sc.duplicate(sc.events[0])
    result = evaluate(store, sc, AT).checks[CHECK]
    assert replace(result.evidence, details=None) == Evidence(events=("early", "late"))
    assert (result.value, result.sample_size) == (2, 2)


def test_it_is_a_warning_that_breaches_above_zero(store: Store) -> None:
    """Default target 0, comparison >, severity warning."""
    sc = Scenario()
    sc.session("s1").asks(ASKED).answers(ASKED + S)
    result = evaluate(store, sc, AT).checks[CHECK]
    assert (result.target, result.comparison.value, result.severity.value) == (0, ">", "warning")


# --- every output shows it ------------------------------------------------------------------


def _unanswered(store: Store, config: dict | None = None):  # type: ignore[no-untyped-def, type-arg]
    """A report whose only breach is one question answered without recall (event q1)."""
    sc = Scenario()
    sc.session("s1").starts(ASKED).recalls(ASKED).asks(ASKED + M, id="q1").answers(ASKED + 2 * M)
    sc.session("s1").ends(ASKED + 3 * M).observes(ASKED + 4 * M)
    return evaluate(store, sc, AT, config)


def test_the_json_report_has_it_with_its_evidence(store: Store) -> None:
    """schema_version 1 lists every check id of SPEC section 5, this one included."""
    document = json.loads(render_json(_unanswered(store)))
    assert list(document["checks"]) == list(PLUGINS.check_ids)
    found = document["checks"][CHECK]
    assert (found["status"], found["value"], found["sample_size"]) == ("breached", 1, 1)
    assert found["evidence"]["events"] == ["q1"]
    (detail,) = found["evidence"]["event_details"]  # additive: the message's session
    assert (detail["event_id"], detail["session_id"]) == ("q1", "s1")


def test_the_text_report_lists_its_evidence(store: Store) -> None:
    """The text report shows the breach and the message's event id."""
    text = render_text(_unanswered(store))
    assert "recall_before_response" in text and "1 of 1 human messages had no recall" in text
    assert "events: q1" in text


def test_the_page_shows_its_tile_and_evidence(store: Store) -> None:
    """The HTML page has the check's tile and its evidence id."""
    page = render_page(_unanswered(store))
    assert "recall_before_response" in page and "q1" in page


def test_it_fires_an_alert_naming_the_message(store: Store) -> None:
    """A breach opens an alert whose message names the check and the event id."""
    settings = settings_from_mapping(
        {"store": {"database": f"wd_{uuid.uuid4().hex[:12]}"}}, plugins=PLUGINS, env={}
    )
    notifier = RecordingNotifier()
    process(
        store,
        settings,
        _unanswered(store),
        now=AT,
        notifiers={notifier.name: notifier},
        timer=FakeTimer(),
    )
    (sent,) = notifier.sent
    assert "recall_before_response" in sent.plain and "q1" in sent.plain


def test_its_value_is_a_metric(store: Store) -> None:
    """The daemon's telemetry records the check's value as the check-value gauge."""
    report = _unanswered(store)
    reader = InMemoryMetricReader()
    telemetry = Telemetry(TracerProvider(), MeterProvider(metric_readers=[reader]), source="src")
    telemetry.record_run(report.window, status="breached", start_ns=1, end_ns=2, report=report)
    data = reader.get_metrics_data()
    assert data is not None
    values = {
        dict(point.attributes or {}).get("check"): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "memory_watchdog.check.value"
        for point in metric.data.data_points
    }
    assert values[CHECK] == 1.0
