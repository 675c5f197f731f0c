"""`explain` tells one session's story: its events, what counted against them, its obligations."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from tests.builder import T0, H, M, S, Scenario, settings_for, unique_table
from tests.test_cli import run
from watchdog.cli.explain import window_of
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.demo.data import generate_demo, write_demo
from watchdog.demo.model import FAULTS
from watchdog.report.explain import render_explain_json, render_explain_text
from watchdog.runner.explain import explain

# The tests run `memory-watchdog explain` as a process, or query the store: not in test-fast.
pytestmark = pytest.mark.slow

AT = T0 + 4 * H

# What the explanation of a session says of each fault the demo injects into it.
SAYS: dict[str, tuple[str, ...]] = {
    "cold start": ("start recall:", "missed - recall_coverage"),
    "late recall": ("start recall: missed, late by", "after the first event) - recall_coverage"),
    "silent end without observe": ("end observe (silent end):", "missed - observe_coverage"),
    "end without observe": ("end observe (end event):", "missed - observe_coverage"),
    "answer without recall": ("recall before response:", "missed - recall_before_response"),
    "compaction without observe": ("compaction observe:", "missed - observe_coverage"),
    "lost observe": ("observe outcome:", "missed - observe_failure_rate"),
    "failure streak": ("counted by circuit_breaker",),
    "slow recall": ("counted by recall_latency_p95: latency_ms at or above the target 3000 ms",),
    "failed observe": ("counted by observe_failure_rate: failed",),
    "deviation extra_key": ("agent_deviation_contract: breaks the contract: extra_key",),
    "deviation unknown_tipo": ("agent_deviation_contract: breaks the contract: tipo_invalid",),
    "deviation too_many_ids": ("breaks the contract: evidence_too_many",),
    "deviation duplicate_ids": ("breaks the contract: evidence_duplicates",),
    "deviation missing_evidence": ("counted by agent_deviation_evidence: cites evidence ids",),
}


def text_of(store: Store, settings: Settings, session_id: str, at: datetime = AT) -> str:
    explained = explain(store, settings, session_id, at)
    return render_explain_text(explained, "t", settings.events, window_of(settings))


def lines_with(text: str, *parts: str) -> list[str]:
    return [line for line in text.splitlines() if all(part in line for part in parts)]


def test_every_fault_has_what_explain_says_of_it() -> None:
    """The table of what explain says covers every fault the demo can inject."""
    assert set(SAYS) == set(FAULTS)


@pytest.mark.slow
def test_explain_names_the_fault_of_every_session_the_demo_injects_one_into(store: Store) -> None:
    """Each session the demo made faulty, explained at the demo's `at`, names its faults."""
    table = unique_table()
    write_demo(store, table, sessions=100, seed=3, at=AT)
    settings = settings_for(table)
    faults = generate_demo(sessions=100, seed=3, at=AT).faults
    assert {f for found in faults.values() for f in found} == set(FAULTS)
    for session_id, injected in faults.items():
        text = text_of(store, settings, session_id)
        for fault in injected:
            assert lines_with(text, *SAYS[fault]), f"{session_id} ({fault}):\n{text}"


def test_a_healthy_session_meets_every_obligation_it_had(store: Store) -> None:
    """Every obligation is met, by the event that met it, and counted in its window."""
    sc = Scenario()
    s = sc.session("s1").starts(T0 + H).recalls(T0 + H + 2 * S)
    s.compacts(T0 + H + 20 * M).observes(T0 + H + 21 * M)
    s.ends(T0 + H + 40 * M).observes(T0 + H + 41 * M)
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table)
    explained = explain(store, settings, "s1", AT)
    document = json.loads(render_explain_json(explained, "t", settings.events, window_of(settings)))
    by_label = {o["obligation"]: o for o in document["obligations"]}
    assert set(by_label) == {
        "start recall",
        "compaction observe",
        "end observe (end event)",
        "recall outcome",
        "observe outcome",
    }
    assert all(o["status"] == "met" and o["met_by"] for o in document["obligations"])
    assert by_label["start recall"]["met_by"] == "ev-000002"
    assert by_label["start recall"]["window"] == {
        "start": "2026-11-28T00:00:00Z",
        "end": "2026-11-28T04:00:00Z",
    }
    names = [e["name"] for e in document["events"]]
    assert names[:3] == ["session.started", "memory.recall.started", "memory.recall.completed"]
    assert document["events"][2]["outcome"] == "completed"
    assert document["events"][2]["latency_ms"] == 800


def test_obligations_early_in_the_lookback_are_listed_with_what_met_them(store: Store) -> None:
    """A session a day before `at` (well before the window): its obligations, met or not."""
    sc = Scenario()
    early = T0 + 4 * H - 20 * H
    sc.session("early").starts(early).recalls(early + 2 * S).ends(early + 30 * M)
    table = unique_table()
    sc.write(store, table)
    text = text_of(store, settings_for(table), "early")
    assert lines_with(text, "start recall: met - recall_coverage")
    assert lines_with(text, "trigger first event at", "met by ev-000002")
    assert lines_with(text, "end observe (end event):", "missed - observe_coverage")


def test_an_obligation_due_after_at_is_not_yet_due(store: Store) -> None:
    """A silent end judged six hours after the last event is not due before then."""
    sc = Scenario()
    sc.session("s1").starts(T0 + 3 * H).recalls(T0 + 3 * H + S)
    table = unique_table()
    sc.write(store, table)
    text = text_of(store, settings_for(table), "s1")
    assert lines_with(text, "end observe (silent end):", "not yet due")


def test_an_obligation_met_before_it_is_due_says_both(store: Store) -> None:
    """Observed before its silent end is due: not "not yet due ... met by" (which read as a
    contradiction in the README trial), but met already, judged in the window of its deadline."""
    sc = Scenario()
    sc.session("s1").starts(T0 + 3 * H).recalls(T0 + 3 * H + S).observes(T0 + 3 * H + M)
    table = unique_table()
    sc.write(store, table)
    text = text_of(store, settings_for(table), "s1")
    (line,) = lines_with(text, "end observe (silent end):")
    assert "met already, not yet due: the window of its deadline judges it" in line, text
    assert "not yet due -" not in line


def test_a_hostile_session_id_is_printed_escaped(store: Store) -> None:
    """Control characters in an id from the data cannot rewrite the terminal."""
    hostile = "evil\x1b[2J\rsession"
    sc = Scenario()
    sc.session(hostile).starts(T0 + H).recalls(T0 + H + S, fails=True)
    table = unique_table()
    sc.write(store, table)
    text = text_of(store, settings_for(table), hostile)
    assert "\x1b" not in text and "\r" not in text
    assert "evil\\x1b[2J\\rsession" in text
    assert lines_with(text, "counted by recall_failure_rate: failed")


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store the CLI opens, holding one session (made by a process of its own)."""
    from tests.test_cli import make_store

    return make_store(tmp_path_factory.mktemp("explain"), "breached")


def test_a_session_without_events_in_the_lookback_exits_1_in_one_line(cli_store: str) -> None:
    """Nothing to explain: exit 1 and one line naming the lookback."""
    result = run("explain", "nobody", "--store", cli_store, "--at", "2026-11-28T04:00:00Z")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "'nobody' has no event in the lookback 2026-11-27T04:00:00Z" in line


def test_a_hostile_id_without_events_is_named_escaped_once(cli_store: str) -> None:
    """The one line names a hostile id as `printable` shows it everywhere: an ESC is `\\x1b`
    (one backslash on the screen), not doubled by a second quoting."""
    hostile = "a\x1b[31m\r\nb"
    result = run("explain", hostile, "--store", cli_store, "--at", "2026-11-28T04:00:00Z")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "session 'a\\x1b[31m\\r\\nb' has no event in the lookback" in line


def test_explain_on_the_cli_tells_the_cold_start(cli_store: str) -> None:
    """The console script explains a session: exit 0, its missed start recall."""
    at = (T0 + 4 * H).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = run("explain", "cold", "--store", cli_store, "--at", at)
    assert result.returncode == 0, result.stderr
    assert lines_with(result.stdout, "start recall:", "missed - recall_coverage")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (
            ("explain", "unknown"),
            2,
            "explain: 'unknown' is no session: source.ignore_sessions lists it",
        ),
        (("explain", ""), 2, "source.ignore_sessions lists it"),
        (("explain", "s1", "--at", "9999-12-31T23:59:59Z"), 2, "--at:"),
        (("explain", "s1", "--at", "nan"), 2, "--at:"),
        (("explain", "s1", "--format", "html"), 2, "--format:"),
    ],
)
def test_explain_refuses_what_cannot_be_explained(
    cli_store: str, args: tuple[str, ...], code: int, says: str
) -> None:
    """A bad id, time or format: one line, exit 2."""
    result = run(*args, "--store", cli_store)
    assert result.returncode == code
    (line,) = result.stderr.strip().splitlines()
    assert says in line


def test_explain_refuses_a_store_that_does_not_exist(tmp_path: object) -> None:
    """A store directory that is not there: one line, exit 3, nothing created."""
    missing = f"chdb://{tmp_path}/none"
    result = run("explain", "s1", "--store", missing)
    assert result.returncode == 3
    (line,) = result.stderr.strip().splitlines()
    assert "does not exist" in line or "no store" in line, line


def test_a_long_session_is_cut_in_the_text_and_counted(store: Store) -> None:
    """More events than are shown: the count says so."""
    sc = Scenario()
    s = sc.session("busy").starts(T0 + H).recalls(T0 + H + S)
    for i in range(5):
        s.emits("tool.call", T0 + H + (i + 2) * M)
    table = unique_table()
    sc.write(store, table)
    explained = explain(store, settings_for(table), "busy", AT)
    assert explained.total_events == 8 == len(explained.events)
    assert explained.events[0].time == T0 + H
    assert explained.events[-1].time == T0 + H + timedelta(minutes=6)


def test_custom_coverage_obligations_are_listed_and_out_of_scope_ones_not_judged(
    store: Store,
) -> None:
    """A custom coverage check's obligations are the session's too; outside its session
    filter they are listed as not judged."""
    sc = Scenario()
    s = sc.session("s1").starts(T0 + H).recalls(T0 + H + S)
    s.emits("tool.call", T0 + H + M, source="ci")
    table = unique_table()
    sc.write(store, table)
    custom = {
        "id": "tool_recall",
        "kind": "coverage",
        "trigger": ["tool.call"],
        "required": ["memory.recall.started"],
        "grace": "1m",
        "target": 0,
    }
    scoped = {**custom, "id": "ci_only", "session_filter": "source = 'nowhere'"}
    settings = settings_for(table, {"checks": {"custom": [custom, scoped]}})
    text = text_of(store, settings, "s1")
    assert lines_with(text, "memory.recall.started after tool.call: missed - tool_recall")
    assert lines_with(text, "not judged - ci_only", "outside its scope")


def test_a_late_recall_is_missed_and_says_how_late(store: Store) -> None:
    """A start recall after its deadline is missed, and explain says by how much and what the
    deadline was."""
    sc = Scenario()
    sc.session("late").starts(T0 + H).recalls(T0 + H + 5 * M + 42 * S)
    table = unique_table()
    sc.write(store, table)
    settings = settings_for(table)
    text = text_of(store, settings, "late")
    assert lines_with(
        text, "start recall: missed, late by 42s (deadline 5m after the first event)"
    ), text
    assert lines_with(text, "late: ev-000002 at 2026-11-28T01:05:42Z")
    explained = explain(store, settings, "late", AT)
    document = json.loads(render_explain_json(explained, "t", settings.events, window_of(settings)))
    (start,) = [o for o in document["obligations"] if o["obligation"] == "start recall"]
    assert start["status"] == "missed"
    assert start["late"] == {"event_id": "ev-000002", "time": "2026-11-28T01:05:42Z", "by_s": 42.0}


def test_a_recall_never_made_is_missed_without_a_lateness(store: Store) -> None:
    """A cold start has no late recall: nothing says late."""
    sc = Scenario()
    sc.session("cold").starts(T0 + H).emits("tool.call", T0 + H + M)
    table = unique_table()
    sc.write(store, table)
    text = text_of(store, settings_for(table), "cold")
    assert lines_with(text, "start recall: missed - recall_coverage")
    assert not lines_with(text, "late by") and not lines_with(text, "late:")
