"""Listed evidence events can be followed: each with its session, latency and error class, and
`explain <event id>` tells that event's session with the event marked."""

from __future__ import annotations

import json

from checks.base import Report
from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from watchdog.cli.explain import window_of
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.explain import render_explain_json, render_explain_text
from watchdog.report.text import render_json, render_text
from watchdog.runner.explain import explain
from watchdog.runner.once import run_once, window_at

AT = T0 + 4 * H
CHECKS = {
    "observe_failure_rate": {"min_samples": 0},
    "recall_latency_p95": {"min_samples": 0},
}


def faulty(store: Store) -> tuple[Report, Settings]:
    """Two sessions with a failed observe (`qdrant timeout`), one with a slow recall."""
    sc = Scenario()
    for i in range(2):
        s = sc.session(f"s{i}").starts(T0 + H + i * M).recalls(T0 + H + i * M + S)
        s.emits("memory.observe.requested", T0 + H + i * M + 2 * S)
        s.emits("observe.store.failed", T0 + H + i * M + 3 * S, success=0, error="qdrant timeout")
    sc.session("slow").starts(T0 + 2 * H).recalls(T0 + 2 * H + S, latency_ms=5000)
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table, {"checks": CHECKS})
    return run_once(store, settings, window_at(settings, AT)), settings


def test_json_evidence_lists_each_events_session_latency_and_error_class(store: Store) -> None:
    """`event_details` beside `events`: session, name, latency and error class of each."""
    report, _ = faulty(store)
    document = json.loads(render_json(report))
    failed = document["checks"]["observe_failure_rate"]["evidence"]
    assert failed["events"] == ["ev-000005", "ev-000010"]  # the keys it always had stay
    assert failed["event_details"] == [
        {
            "event_id": "ev-000005",
            "name": "observe.store.failed",
            "session_id": "s0",
            "latency_ms": None,
            "error_class": "qdrant timeout",
        },
        {
            "event_id": "ev-000010",
            "name": "observe.store.failed",
            "session_id": "s1",
            "latency_ms": None,
            "error_class": "qdrant timeout",
        },
    ]
    slow = document["checks"]["recall_latency_p95"]["evidence"]["event_details"]
    assert [(d["session_id"], d["latency_ms"]) for d in slow] == [("slow", 5000.0)]


def test_text_evidence_lists_each_event_with_its_facts_and_how_to_explain_it(
    store: Store,
) -> None:
    """The text report names each listed event's session, latency and error class, and the
    explain command of one."""
    report, _ = faulty(store)
    text = render_text(report)
    assert "      ev-000005: session s0, observe.store.failed, error: qdrant timeout\n" in text
    assert "session slow, memory.recall.completed, 5000 ms" in text
    assert "    why one counted: memory-watchdog explain ev-000005 --at" in text


def test_explain_an_event_id_tells_its_session_with_the_event_marked(store: Store) -> None:
    """An event id the evidence lists explains that event's session, the event marked."""
    _, settings = faulty(store)
    explained = explain(store, settings, "ev-000010", AT)
    assert explained.session_id == "s1"
    assert explained.marked == "ev-000010"
    text = render_explain_text(explained, "t", settings.events, window_of(settings))
    (line,) = [ln for ln in text.splitlines() if "ev-000010" in ln and "observe.store" in ln]
    assert line.endswith(">> the event asked about")
    document = json.loads(render_explain_json(explained, "t", settings.events, window_of(settings)))
    assert document["event_id"] == "ev-000010"
    assert [e["event_id"] for e in document["events"] if e["marked"]] == ["ev-000010"]
