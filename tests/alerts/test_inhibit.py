"""Inhibition: a breached telemetry_freshness holds the other alerts of its source, as
Alertmanager's inhibit rules do, and releases them with nothing lost (issue 46, point 1)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

import pytest

from alerts.pipeline import ProcessOutcome, process, process_store_error
from alerts.records import alert_states
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Report, Status, Window
from tests.alerts.conftest import T0, H, make_settings, report
from tests.alerts.test_pipeline import items
from tests.builder import M, Scenario, evaluate_table, unique_table
from watchdog.core.errors import ConfigError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.page import render_page
from watchdog.report.text import render_text

FRESH = "telemetry_freshness"
COVERAGE = "observe_coverage"


def run(
    store: Store,
    settings: Settings,
    at: datetime,
    statuses: Mapping[str, Status],
    chat: RecordingNotifier,
) -> ProcessOutcome:
    """One run judged at `at`, sending to `chat`."""
    return send(store, settings, report(at, statuses), chat)


def send(
    store: Store, settings: Settings, evaluated: Report, chat: RecordingNotifier
) -> ProcessOutcome:
    return process(
        store,
        settings,
        evaluated,
        now=evaluated.window.at,
        notifiers={chat.name: chat},
        timer=FakeTimer(),
    )


def test_a_freshness_breach_holds_the_other_alerts_of_its_source(
    store: Store, settings: Settings
) -> None:
    """Freshness and observe_coverage breach together: only freshness is announced; the other
    fires, held by it, and says so in the run's line and in `alerts`."""
    chat = RecordingNotifier()
    outcome = run(store, settings, T0, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    assert items(chat) == [[f"FIRING {FRESH}"]]
    assert outcome.firing == (COVERAGE, FRESH)
    assert outcome.inhibited == ((COVERAGE, FRESH),)
    assert f"held while {FRESH} fires: {COVERAGE}" in outcome.summary()
    held = {r.alert.check_id: r.alert.inhibited_by for r in alert_states(store, settings)}
    assert held[COVERAGE] == FRESH and held[FRESH] == ""


def test_a_held_alert_still_firing_is_announced_when_freshness_resolves(
    store: Store, settings: Settings
) -> None:
    """When freshness resolves, an alert it held that still fires is announced then, saying
    what held it."""
    chat = RecordingNotifier()
    run(store, settings, T0, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    run(store, settings, T0 + 4 * H, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    run(store, settings, T0 + 8 * H, {COVERAGE: Status.BREACHED, FRESH: Status.OK}, chat)
    assert items(chat) == [[f"FIRING {FRESH}"], [f"FIRING {COVERAGE}", f"RESOLVED {FRESH}"]]
    assert f"held while {FRESH} fired, until now" in chat.sent[1].plain


def test_an_alert_that_resolved_while_held_gets_its_resolve_when_freshness_resolves(
    store: Store, settings: Settings
) -> None:
    """An alert chat was told fires, resolved while freshness held it: its resolve is sent when
    freshness resolves, never lost."""
    chat = RecordingNotifier()
    run(store, settings, T0, {COVERAGE: Status.BREACHED, FRESH: Status.OK}, chat)
    run(store, settings, T0 + 4 * H, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    run(store, settings, T0 + 8 * H, {COVERAGE: Status.OK, FRESH: Status.BREACHED}, chat)
    assert items(chat) == [[f"FIRING {COVERAGE}"], [f"FIRING {FRESH}"]]
    run(store, settings, T0 + 12 * H, {COVERAGE: Status.OK, FRESH: Status.OK}, chat)
    assert items(chat)[2] == [f"RESOLVED {COVERAGE}", f"RESOLVED {FRESH}"]


def test_an_alert_that_fired_and_resolved_while_held_sends_nothing(
    store: Store, settings: Settings
) -> None:
    """Fired and resolved within the hold, chat never heard of it: nothing to announce."""
    chat = RecordingNotifier()
    run(store, settings, T0, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    run(store, settings, T0 + 4 * H, {COVERAGE: Status.OK, FRESH: Status.BREACHED}, chat)
    run(store, settings, T0 + 8 * H, {COVERAGE: Status.OK, FRESH: Status.OK}, chat)
    assert items(chat) == [[f"FIRING {FRESH}"], [f"RESOLVED {FRESH}"]]


def test_the_store_alert_is_never_held_by_freshness(store: Store, settings: Settings) -> None:
    """The watchdog's own `store` alert is no check of the telemetry: freshness does not hold
    it (the default rule's target matchers leave it out)."""
    chat = RecordingNotifier()
    run(store, settings, T0, {FRESH: Status.BREACHED}, chat)
    window = Window(at=T0 + 4 * H, length=4 * H, lookback=24 * H)
    outcome = process_store_error(
        store,
        settings,
        window,
        "table not found",
        now=window.at,
        notifiers={chat.name: chat},
        timer=FakeTimer(),
    )
    assert outcome.inhibited == () and items(chat)[1] == ["ERROR store"]


def test_an_empty_inhibit_list_holds_nothing_and_lists_freshness_first(store: Store) -> None:
    """`alerts.inhibit = []` turns inhibition off: both are announced, freshness first."""
    settings = make_settings({"alerts": {"inhibit": []}})
    chat = RecordingNotifier()
    outcome = run(store, settings, T0, {COVERAGE: Status.BREACHED, FRESH: Status.BREACHED}, chat)
    assert outcome.inhibited == ()
    assert items(chat) == [[f"FIRING {FRESH}", f"FIRING {COVERAGE}"]]


def test_an_inhibit_rule_holds_only_the_targets_its_matchers_name(store: Store) -> None:
    """A rule of one's own: freshness holds the warnings only; a critical alert is announced."""
    rule = {
        "source_matchers": [f'alertname = "{FRESH}"'],
        "target_matchers": ['severity = "warning"'],
        "equal": ["source"],
    }
    settings = make_settings({"alerts": {"inhibit": [rule]}})
    chat = RecordingNotifier()
    statuses = {
        COVERAGE: Status.BREACHED,
        "recall_latency_p95": Status.BREACHED,
        FRESH: Status.BREACHED,
    }
    outcome = run(store, settings, T0, statuses, chat)
    assert outcome.inhibited == (("recall_latency_p95", FRESH),)
    assert items(chat) == [[f"FIRING {FRESH}", f"FIRING {COVERAGE}"]]


@pytest.mark.parametrize(
    ("matcher", "problem"),
    [
        ('alertname ~ "x"', "is not a matcher"),
        ('team = "x"', "unknown label 'team'"),
        ('alertname =~ "("', "not a regular expression"),
    ],
)
def test_a_bad_matcher_is_a_config_error_naming_it(matcher: str, problem: str) -> None:
    """A matcher that cannot be read is refused when the config loads, naming the key."""
    rule = {"source_matchers": [matcher], "target_matchers": ['severity = "warning"']}
    with pytest.raises(ConfigError) as raised:
        make_settings({"alerts": {"inhibit": [rule]}})
    assert "alerts.inhibit" in str(raised.value) and problem in str(raised.value)


# --- from telemetry that stops ---------------------------------------------------------------


def _stopped_telemetry(store: Store) -> str:
    """A table whose telemetry stops at 01:55, inside the window [00:00, 04:00): a session then
    running has no end event, so its silent end falls due six hours later."""
    table = unique_table()
    scenario = Scenario()
    start = T0 - 4 * H  # T0 is 04:00: the sessions start at 00:00
    scenario.session("done").starts(start).recalls(start + M).ends(start + 10 * M).observes(
        start + 11 * M
    )
    scenario.session("running").starts(start + H).recalls(start + H + M).recalls(start + H + 55 * M)
    scenario.write(store, table)
    return table


def test_telemetry_that_stops_reads_as_freshness_not_as_silent_sessions(store: Store) -> None:
    """Telemetry stops mid-window: the window ending 08:00 breaches freshness and
    observe_coverage (the running session "ended silently"); chat is told of freshness only,
    and the text report lists it first."""
    table = _stopped_telemetry(store)
    config = {"source": {"table": table}}
    settings = make_settings(config)
    chat = RecordingNotifier()
    quiet = evaluate_table(store, table, T0, config)
    send(store, settings, quiet, chat)
    assert chat.sent == []
    stopped = evaluate_table(store, table, T0 + 4 * H, config)
    assert stopped.checks[FRESH].status is Status.BREACHED
    assert stopped.checks[COVERAGE].status is Status.BREACHED
    outcome = send(store, settings, stopped, chat)
    assert items(chat) == [[f"FIRING {FRESH}"]]
    assert (COVERAGE, FRESH) in outcome.inhibited
    first = next(line for line in render_text(stopped).splitlines() if line.startswith("✗"))
    assert FRESH in first


def test_the_page_lists_a_breached_freshness_first(store: Store) -> None:
    """On the page of the window where telemetry stopped, freshness is the first tile and the
    first breach detailed, before observe_coverage."""
    table = _stopped_telemetry(store)
    stopped = evaluate_table(store, table, T0 + 4 * H, {"source": {"table": table}})
    page = render_page(stopped)
    tiles = re.findall(r'id="tile-([a-z_0-9]+)"', page)
    details = re.findall(r'<article class="detail[^"]*" id="check-([a-z_0-9]+)"', page)
    assert tiles[0] == FRESH and details[:2] == [FRESH, COVERAGE]
