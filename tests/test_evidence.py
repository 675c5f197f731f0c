"""Evidence: one typed value per result, its JSON shape, and the same facts in every output."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from alerts.lifecycle import Kind, Notification
from alerts.render import templates
from checks.evidence import Evidence, Fact, FailureRun, IdList
from tests.builder import T0, H, M
from tests.pages import known_report, parse
from watchdog.report.page import render_page
from watchdog.report.text import render_text

MS = timedelta(milliseconds=1)

# One evidence value per check kind, and the keys its JSON has always had, in order.
SHAPES = [
    (Evidence(sessions=("s1",)), ["sessions"]),
    (
        Evidence(completed=3, failed=1, lost=1, events=("e1", "e2")),
        ["completed", "failed", "lost", "events"],
    ),
    (Evidence(events=("e1",), at_or_above_target=1), ["events", "at_or_above_target"]),
    (Evidence(events=("e1",), matching=4), ["events", "matching"]),
    (Evidence(events=("e1",), kinds=(("extra_key", 1),)), ["events", "kinds"]),
    (Evidence(events=("e1",), missing_ids=2), ["events", "missing_ids"]),
    (Evidence(run=FailureRun(T0, T0 + M, 4)), ["start", "end", "length"]),
    (Evidence(newest=T0), ["newest"]),
    (Evidence(no_event=True), ["newest"]),
    (Evidence(), []),
]


@pytest.mark.parametrize(("evidence", "keys"), SHAPES)
def test_json_keeps_each_kinds_keys_in_order(evidence: Evidence, keys: list[str]) -> None:
    """Each kind's evidence object has the keys (and key order) of the schema_version 1 report."""
    assert list(evidence.to_json()) == keys


def test_json_values_are_plain() -> None:
    """Ids become lists, kinds an object, times RFC 3339; a freshness check without events says null."""
    run = Evidence(run=FailureRun(T0 + H, T0 + H + 3 * M + MS * 83, 5))
    assert run.to_json() == {
        "start": "2026-11-28T01:00:00Z",
        "end": "2026-11-28T01:03:00.083Z",
        "length": 5,
    }
    kinds = Evidence(events=("e1",), kinds=(("extra_key", 1), ("tipo_invalid", 2)))
    assert kinds.to_json() == {"events": ["e1"], "kinds": {"extra_key": 1, "tipo_invalid": 2}}
    assert Evidence(no_event=True).to_json() == {"newest": None}


def test_no_event_and_newest_exclude_each_other() -> None:
    """A freshness result either has a newest event or has none; never both."""
    with pytest.raises(ValueError, match="exclude"):
        Evidence(newest=T0, no_event=True)


def test_shown_lists_ids_then_counts_kinds_run_and_newest() -> None:
    """The display facts come in one order, with words instead of keys."""
    evidence = Evidence(
        events=("e1",),
        failed=2,
        lost=1,
        kinds=(("evidence_too_many", 1),),
        run=FailureRun(T0, T0 + M, 4),
        newest=T0 + H,
    )
    shown = evidence.shown()
    assert shown.ids == (IdList("events", ("e1",)),)
    assert shown.facts == (
        Fact("counts", "2 failed, 1 lost"),
        Fact("breach kinds", "evidence too many 1"),
        Fact("longest run", "4 failures from 2026-11-28T00:00:00Z to 2026-11-28T00:01:00Z"),
        Fact("newest event", "2026-11-28T01:00:00Z"),
    )
    assert not Evidence(sessions=(), events=()).shown()


def test_text_page_and_chat_show_the_same_facts() -> None:
    """The text report, the page and chat render one breached result's evidence as the same facts."""
    evidence = Evidence(
        events=("ev-1", "ev-2"),
        missing_ids=2,
        kinds=(("extra_key", 1),),
        run=FailureRun(T0, T0 + M, 4),
        newest=T0 + H,
    )
    report = known_report()
    result = replace(report.checks["observe_failure_rate"], evidence=evidence)
    report = replace(report, checks={**report.checks, result.id: result})
    facts = [(f.label, f.text) for f in evidence.shown().facts]

    text = render_text(report)
    assert all(f"    {label}: {value}\n" in text for label, value in facts)

    detail = parse(render_page(report)).find("article", id="check-observe_failure_rate")[0]
    listed = detail.find("dl", cls="evidence-facts")[0]
    pairs = [
        (dt.all_text(), dd.all_text())
        for dt, dd in zip(listed.find("dt"), listed.find("dd"), strict=True)
    ]
    assert pairs == facts

    note = Notification(Kind.FIRE, "src", result.id, "breached", result, report.window, T0)
    context = [b for b in templates().message([note]).blocks if b["type"] == "context"][1]
    assert [e["text"] for e in context["elements"]][1:] == [f"{k}: {v}" for k, v in facts]
