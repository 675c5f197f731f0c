"""Messages: golden Block Kit JSON, escaping of everything from data, template checks at load."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.lifecycle import STORE_CHECK, Kind, Notification
from alerts.pipeline import source_unreadable
from alerts.render import Templates, escape_mrkdwn, format_window, templates
from checks.base import Comparison, Severity, Status, Window
from checks.evidence import Evidence, FailureRun
from tests.alerts.conftest import SOURCE, T0, H, result
from watchdog.core.errors import ConfigError

GOLDEN = Path(__file__).parent / "golden"
WINDOW = Window(at=T0, length=4 * H, lookback=24 * H)

FIRE = Notification(
    Kind.FIRE,
    SOURCE,
    "recall_coverage",
    "breached",
    result(
        "recall_coverage",
        Status.BREACHED,
        7.0,
        summary="7 of 412 sessions started without recall",
        evidence=Evidence(
            sessions=("5b0e1f", "6c2a90", "7d3b11", "8e4c22", "9f5d33", "a06e44", "b17f55")
        ),
        sample_size=412,
    ),
    WINDOW,
    T0,
)
REPEAT = Notification(
    Kind.REPEAT,
    SOURCE,
    "agent_deviation_contract",
    "breached",
    result(
        "agent_deviation_contract",
        Status.BREACHED,
        2.0,
        summary="2 of 9 deviation events break the payload contract (unknown key: 2)",
        evidence=Evidence(events=("ev-000123", "ev-000456"), kinds=(("unknown_key", 2),)),
    ),
    WINDOW,
    T0 - 24 * H,
)
RESOLVE = Notification(
    Kind.RESOLVE,
    SOURCE,
    "recall_latency_p95",
    "breached",
    result(
        "recall_latency_p95",
        Status.OK,
        1240.0,
        summary="recall_completed latency_ms 1240 ms over 380 events",
    ),
    WINDOW,
    T0 - 8 * H,
    fired_for=8 * H,
)
ERROR = Notification(
    Kind.FIRE,
    SOURCE,
    "circuit_breaker",
    "error",
    result("circuit_breaker", Status.ERROR),
    WINDOW,
    T0,
)
CASES = {"fire": FIRE, "repeat": REPEAT, "resolve": RESOLVE, "error": ERROR}


def rendered_json(notification: Notification, link: str = "") -> str:
    message = templates().message([notification], link=link)
    document = {"blocks": message.blocks, "text": message.text, "plain": message.plain}
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_block_kit(case: str) -> None:
    """The Block Kit JSON and text of a fire, a repeat, a resolve and an error match the golden files."""
    path = GOLDEN / f"{case}.json"
    actual = rendered_json(CASES[case])
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(actual, encoding="utf-8")
    assert actual == path.read_text(encoding="utf-8"), (
        f"regenerate with UPDATE_GOLDEN=1 if intended ({path})"
    )


LINK = "https://watchdog.example/reports/20261128T040000Z"


def test_golden_block_kit_with_a_report_link() -> None:
    """With `report.base_url` set, the message links to the window's page: golden fire_link.json."""
    path = GOLDEN / "fire_link.json"
    actual = rendered_json(FIRE, link=LINK)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(actual, encoding="utf-8")
    assert actual == path.read_text(encoding="utf-8"), (
        f"regenerate with UPDATE_GOLDEN=1 if intended ({path})"
    )


def test_the_link_is_a_mrkdwn_link_in_slack_and_a_plain_url_on_stdout() -> None:
    """Block Kit and the text fallback carry `<url|...>`; the plain text says "Report: <url>"."""
    message = templates().message([FIRE, RESOLVE], link=LINK)
    header = message.blocks[1]["elements"]
    assert header[-1] == {"type": "mrkdwn", "text": f"<{LINK}|Open the report of this window>"}
    assert message.text.splitlines()[-1] == f"Report: <{LINK}>"
    assert message.plain.splitlines()[-1] == f"Report: {LINK}"
    unlinked = templates().message([FIRE, RESOLVE])
    assert "Report" not in unlinked.plain and "reports/" not in json.dumps(unlinked.blocks)


def test_one_message_lists_new_alerts_before_reminders_and_resolutions() -> None:
    """A grouped message puts fires first (critical first), then repeats, then resolves."""
    message = templates().message([RESOLVE, REPEAT, FIRE, ERROR])
    sections = [b["text"]["text"].split("\n")[0] for b in message.blocks if b["type"] == "section"]
    assert [s.split(" · ")[1] for s in sections] == [
        "`recall_coverage`",
        "`circuit_breaker`",
        "`agent_deviation_contract`",
        "`recall_latency_p95`",
    ]
    assert (
        message.blocks[0]["text"]["text"]
        == ":rotating_light: memory-watchdog: 3 firing, 1 resolved"
    )


HOSTILE = ["<!channel>", "<https://evil.example|click me>", "a & b", "<@U123>"]


def test_data_is_escaped_for_mrkdwn_everywhere_in_slack() -> None:
    """Session ids and summaries from data cannot ping (`<!channel>`), forge links, or break entities."""
    note = Notification(
        Kind.FIRE,
        "src<!here>",
        "recall_coverage",
        "breached",
        result(
            "recall_coverage",
            Status.BREACHED,
            4.0,
            summary="4 sessions <!channel> & <https://evil.example|click me>",
            evidence=Evidence(sessions=tuple(HOSTILE)),
        ),
        WINDOW,
        T0,
    )
    message = templates().message([note])
    slack = json.dumps(message.blocks, ensure_ascii=False) + message.text
    for raw in [*HOSTILE, "<!here>"]:
        assert raw not in slack
    assert "&lt;!channel&gt;" in slack and "&lt;https://evil.example|click me&gt;" in slack
    assert "a &amp; b" in slack and "&lt;@U123&gt;" in slack
    assert "<!channel>" in message.plain  # plain text (stdout) is not Slack: unescaped


def test_escape_mrkdwn() -> None:
    """Exactly Slack's three control characters are escaped, ampersand first."""
    assert escape_mrkdwn("<a & b>") == "&lt;a &amp; b&gt;"
    assert escape_mrkdwn("&lt;") == "&amp;lt;"


def test_quotes_and_newlines_in_data_keep_the_json_valid() -> None:
    """Values are JSON-escaped by the environment, so quotes and backslashes cannot break the blocks."""
    note = Notification(
        Kind.FIRE,
        SOURCE,
        "recall_coverage",
        "breached",
        result("recall_coverage", Status.BREACHED, 1.0, evidence=Evidence(sessions=('a"b\\c\nd',))),
        WINDOW,
        T0,
    )
    context = [b for b in templates().message([note]).blocks if b["type"] == "context"][1]
    assert context["elements"][0]["text"] == 'sessions: `a"b\\c d`'


def test_evidence_is_capped_at_five_with_a_count_of_the_rest() -> None:
    """At most 5 evidence ids are shown, then "and N more" (N from the check's value)."""
    context = [b for b in templates().message([FIRE]).blocks if b["type"] == "context"][1]
    text = context["elements"][0]["text"]
    assert text.count("`") == 10 and text.endswith("and 2 more")


def test_the_message_shows_the_evidence_facts_and_nothing_else() -> None:
    """The evidence context is the ids, then Evidence.shown()'s facts as "label: text": no other field."""
    evidence = Evidence(events=("ev-1",), kinds=(("extra_key", 1),))
    note = Notification(
        Kind.FIRE,
        SOURCE,
        "agent_deviation_contract",
        "breached",
        result("agent_deviation_contract", Status.BREACHED, 1.0, evidence=evidence),
        WINDOW,
        T0,
    )
    context = [b for b in templates().message([note]).blocks if b["type"] == "context"][1]
    assert [e["text"] for e in context["elements"]] == [
        "events: `ev-1`",
        "breach kinds: extra key 1",
    ]


def test_a_still_firing_alert_shows_its_newest_event_whatever_the_latest_status() -> None:
    """The newest event time is shown wherever evidence is, as on the page: also after too few samples."""
    newest = T0 - 5 * H
    note = Notification(
        Kind.REPEAT,
        SOURCE,
        "telemetry_freshness",
        "breached",
        result(
            "telemetry_freshness",
            Status.INSUFFICIENT_DATA,
            18000.0,
            unit="s",
            target=14400.0,
            evidence=Evidence(newest=newest),
        ),
        WINDOW,
        T0 - 24 * H,
    )
    message = templates().message([note])
    context = [b for b in message.blocks if b["type"] == "context"][1]
    assert [e["text"] for e in context["elements"]] == ["newest event: 2026-11-27T23:00:00Z"]
    assert "Newest event: 2026-11-27T23:00:00Z." in message.plain


def write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text, encoding="utf-8")


def test_template_typo_fails_at_load_time(tmp_path: Path) -> None:
    """StrictUndefined: a misspelt field in a custom template is a config error naming file and line."""
    builtin = (Path(__file__).parents[2] / "alerts" / "templates" / "message.txt.j2").read_text()
    write(tmp_path, "message.txt.j2", builtin.replace("{{ a.summary }}", "{{ a.sumary }}"))
    with pytest.raises(ConfigError) as caught:
        Templates(str(tmp_path))
    text = str(caught.value)
    assert (
        text.startswith("alerts.templates_dir:") and "message.txt.j2:" in text and "sumary" in text
    )


def test_template_syntax_error_fails_at_load_time(tmp_path: Path) -> None:
    """A template that does not parse is a config error, not a crash at the first alert."""
    write(tmp_path, "message.json.j2", '{"blocks": [{% for a in alerts %}]}')
    with pytest.raises(ConfigError, match=r"message\.json\.j2"):
        Templates(str(tmp_path))


def test_template_that_is_not_block_kit_fails_at_load_time(tmp_path: Path) -> None:
    """A Block Kit template must render {"blocks": [...]} as JSON."""
    write(tmp_path, "message.json.j2", "{{ title }}")
    with pytest.raises(ConfigError, match="valid JSON"):
        Templates(str(tmp_path))


def test_templates_dir_overrides_file_by_file(tmp_path: Path) -> None:
    """A custom message.txt.j2 replaces the text; the built-in Block Kit template stays."""
    write(
        tmp_path,
        "message.txt.j2",
        "ALERT {{ title }}: {% for a in alerts %}{{ a.check_id }}{% endfor %}",
    )
    message = Templates(str(tmp_path)).message([FIRE])
    assert message.plain == "ALERT memory-watchdog: 1 firing: recall_coverage"
    assert message.blocks[0]["type"] == "header"


def test_missing_templates_dir_is_a_config_error(tmp_path: Path) -> None:
    """alerts.templates_dir that does not exist is named in a config error."""
    with pytest.raises(ConfigError, match="is not a directory"):
        Templates(str(tmp_path / "nope"))


def test_environment_is_built_once() -> None:
    """The same templates directory gives the same (already checked) environments."""
    assert templates() is templates()


def test_value_formats_follow_the_unit() -> None:
    """Ratios as percentages, latencies in ms, freshness as a duration."""
    rate = result(
        "observe_failure_rate",
        Status.BREACHED,
        0.0734,
        unit="ratio",
        target=0.05,
        comparison=Comparison.GE,
    )
    fresh = result("telemetry_freshness", Status.BREACHED, 20000.0, unit="s", target=14400)
    notes = [
        Notification(Kind.FIRE, SOURCE, r.id, "breached", r, WINDOW, T0, None)
        for r in (rate, fresh)
    ]
    plain = templates().message(notes).plain
    assert "Value 7.3%, breach when >= 5.0%" in plain
    assert "Value 5h33m, breach when > 4h" in plain
    assert f"[{Severity.CRITICAL.value}]" in plain


def test_the_plain_text_forms_keep_the_case_of_every_value() -> None:
    """Slack's text fallback and the stdout text lower-case nothing: times, ids, summaries as written."""
    moment = T0 - 2 * H + timedelta(seconds=57, milliseconds=83)
    note = Notification(
        Kind.REPEAT,
        "Prod.OTel_Events",
        "circuit_breaker",
        "breached",
        result(
            "circuit_breaker",
            Status.BREACHED,
            4.0,
            summary="Longest run ends at 2026-11-28T02:00:57.083Z in Worker-B",
            evidence=Evidence(
                events=("EV-Alpha", "ev-beta"),
                run=FailureRun(moment, moment + 3 * H / 60, 4),
                newest=moment,
            ),
        ),
        WINDOW,
        T0 - 24 * H,
    )
    message = templates().message([note])
    for form in (message.text, message.plain):
        for written in (
            "Prod.OTel_Events",
            "Longest run ends at 2026-11-28T02:00:57.083Z in Worker-B",
            "EV-Alpha",
            "Events: EV-Alpha, ev-beta.",
            "Longest run: 4 failures from 2026-11-28T02:00:57.083Z to 2026-11-28T02:03:57.083Z.",
            "Newest event: 2026-11-28T02:00:57.083Z.",
            "circuit_breaker still breached (firing for 1d)",
        ):
            assert written in form, (written, form)
        assert "t02:" not in form and "057.083z" not in form


def test_a_window_shorter_than_a_minute_shows_its_seconds() -> None:
    """A 15s window reads 09:59:45 – 10:00:00, never "09:59 – 09:59"; whole minutes stay short."""
    at = datetime(2026, 11, 28, 10, 0, 0, tzinfo=UTC)
    short = Window(at=at - timedelta(seconds=15), length=timedelta(seconds=15), lookback=24 * H)
    assert format_window(short) == "2026-11-28 09:59:30 – 09:59:45 UTC"
    assert format_window(WINDOW) == "2026-11-28 00:00 – 04:00 UTC"
    odd = Window(at=at + timedelta(milliseconds=250), length=4 * H, lookback=24 * H)
    assert format_window(odd) == "2026-11-28 06:00:00.250 – 10:00:00.250 UTC"


def test_the_store_alert_states_no_target_it_does_not_have() -> None:
    """The `store` pseudo check has no value to compare: its message says no "breach when > 0"."""
    note = Notification(
        Kind.FIRE,
        SOURCE,
        STORE_CHECK,
        "error",
        source_unreadable("table joelclaw.otel_events not found"),
        WINDOW,
        T0,
    )
    message = templates().message([note])
    slack = json.dumps(message.blocks, ensure_ascii=False) + message.text
    assert "&gt;" not in slack and "Breach when" not in slack
    assert "breach when" not in message.plain and ">" not in message.plain
    assert "could not read the source: table joelclaw.otel_events not found" in message.plain


def test_a_reminder_under_no_data_says_since_when_instead_of_quoting_it_as_the_breach() -> None:
    """keep_state: a firing alert whose latest windows had nothing to judge says "no data since"."""
    note = Notification(
        Kind.REPEAT,
        SOURCE,
        "recall_coverage",
        "breached",
        result("recall_coverage", Status.NO_DATA, summary="no session had an obligation due"),
        WINDOW,
        T0 - 24 * H,
        no_data_since=T0 - 20 * H,
    )
    message = templates().message([note])
    section = next(b for b in message.blocks if b["type"] == "section")["text"]["text"]
    headline = (
        "recall_coverage still firing (for 1d), but no data since 2026-11-27T08:00:00Z:"
        " the breach can be neither confirmed nor resolved"
    )
    assert f"*{headline}*" in section
    assert "latest window: no session had an obligation due" in section
    assert f"STILL FIRING recall_coverage [critical]: {headline}." in message.plain


def test_a_no_data_alert_is_worded_as_no_data_from_fire_to_resolve() -> None:
    """alerting: the alert of its own kind says "has no data", "still has no data", "has data again"."""
    no_data = result("recall_coverage", Status.NO_DATA, summary="no session had an obligation due")
    fire = Notification(
        Kind.FIRE,
        SOURCE,
        "recall_coverage",
        "no_data",
        no_data,
        WINDOW,
        T0,
        no_data_since=T0 - 4 * H,
    )
    repeat = replace(fire, kind=Kind.REPEAT, firing_since=T0 - 24 * H)
    resolve = Notification(
        Kind.RESOLVE,
        SOURCE,
        "recall_coverage",
        "no_data",
        result("recall_coverage", Status.OK),
        WINDOW,
        T0 - 8 * H,
        fired_for=8 * H,
    )
    plain = [templates().message([n]).plain for n in (fire, repeat, resolve)]
    assert (
        "- NO DATA recall_coverage [critical]: recall_coverage has no data since 2026-11-28T00:00:00Z."
        in plain[0]
    )
    assert (
        "recall_coverage still has no data since 2026-11-28T00:00:00Z (firing for 1d)." in plain[1]
    )
    assert "recall_coverage has data again after 8h." in plain[2]
    assert not any("breached" in p for p in plain)
