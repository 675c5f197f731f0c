"""Chat messages from Jinja2 templates (Slack Block Kit, its text fallback, plain text),
escaped by the environments so that no template can forget, and checked against a sample
when they load (docs/alerts.md#your-own-templates)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    StrictUndefined,
    TemplateError,
    TemplateNotFound,
    TemplateSyntaxError,
)

from alerts.base import UnreadablePayload, read_object
from alerts.lifecycle import RUN_CHECK, STORE_CHECK, Cause, Kind, Notification
from checks.base import CheckResult, Comparison, Severity, Status, Window
from checks.evidence import Evidence, FailureRun
from checks.verdict import format_target, format_value
from watchdog.core.durations import human_duration
from watchdog.core.errors import ConfigError
from watchdog.core.text import printable
from watchdog.core.times import rfc3339
from watchdog.core.vocabulary import FRESHNESS_CHECK_ID

BUILTIN_DIR = Path(__file__).parent / "templates"
MESSAGE_BLOCKS = "message.json.j2"
MESSAGE_TEXT = "message.txt.j2"
TEST_BLOCKS = "test.json.j2"
TEST_TEXT = "test.txt.j2"
TEMPLATES = (MESSAGE_BLOCKS, MESSAGE_TEXT, TEST_BLOCKS, TEST_TEXT)

SAMPLE_LINK = "https://watchdog.example/reports/20261128T040000Z"
MAX_ALERTS = 15  # sections per message; Block Kit allows 50 blocks
MAX_EVIDENCE = 5
MAX_SUMMARY = 500
MAX_ID = 100


def escape_mrkdwn(text: str) -> str:
    """Slack's three control characters as entities: `&` `<` `>`."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _text(value: Any) -> str:
    """Every value a template shows: controls escaped, so no output carries an ESC or a CR."""
    return printable(value, limit=None)


def _finalize_blocks(value: Any) -> str:
    """A value inside a Block Kit JSON string: mrkdwn-escaped, then JSON-escaped."""
    return json.dumps(escape_mrkdwn(_text(value)), ensure_ascii=False)[1:-1]


def _finalize_mrkdwn(value: Any) -> str:
    return escape_mrkdwn(_text(value))


# --- the context templates see -------------------------------------------------------------


def _clock(moment: datetime, *, seconds: bool) -> str:
    """A time of day: to the minute, or with seconds (and milliseconds when it has some)."""
    if not seconds:
        return f"{moment:%H:%M}"
    millis = f".{moment.microsecond // 1000:03d}" if moment.microsecond else ""
    return f"{moment:%H:%M:%S}{millis}"


def format_window(window: Window) -> str:
    """The window for people: `2026-11-28 00:00 – 04:00 UTC`, with seconds when a bound has them.

    A window shorter than a minute, or one evaluated at a time that is not a
    whole minute, would otherwise read "09:59 – 09:59".
    """
    start, end = window.start, window.end
    seconds = any(t.second or t.microsecond for t in (start, end))
    first = f"{start:%Y-%m-%d} {_clock(start, seconds=seconds)}"
    if start.date() == end.date():
        return f"{first} – {_clock(end, seconds=seconds)} UTC"
    return f"{first} – {end:%Y-%m-%d} {_clock(end, seconds=seconds)} UTC"


def _clip(text: str, limit: int) -> str:
    return printable(" ".join(text.split()), limit)


def _duration(delta: timedelta | None) -> str:
    return human_duration(delta.total_seconds()) if delta is not None else ""


def _subject(n: Notification) -> str:
    return f"the source {n.source}" if n.check_id == STORE_CHECK else n.check_id


def _run_headline(n: Notification, firing_for: str) -> str:
    """The `run` alert: a run of the watchdog's own died, which no window's data caused."""
    if n.kind is Kind.RESOLVE:
        after = f" after {_duration(n.fired_for)}" if n.fired_for is not None else ""
        return f"the watchdog's runs finish again{after}"
    if n.kind is Kind.FIRE:
        return "a run of the watchdog died before it finished"
    return f"runs of the watchdog still die before they finish (for {firing_for})"


def _headline(n: Notification) -> str:
    firing_for = _duration(n.at - n.firing_since) if n.firing_since else ""
    if n.check_id == RUN_CHECK:
        return _run_headline(n, firing_for)
    subject = _subject(n)
    verb = "read" if n.check_id == STORE_CHECK else "evaluate"
    status = n.result.status
    no_data_since = rfc3339(n.no_data_since) if n.no_data_since else ""
    if n.kind is Kind.RESOLVE:
        after = f" after {_duration(n.fired_for)}" if n.fired_for is not None else ""
        if n.is_error:
            return f"the watchdog can {verb} {subject} again{after}"
        if n.no_data:
            return f"{subject} has data again{after}"
        return f"{subject} resolved{after}"
    if n.kind is Kind.FIRE:
        if n.is_error:
            return f"the watchdog could not {verb} {subject}"
        if n.no_data:
            return f"{subject} has no data since {no_data_since}"
        return f"{subject} breached"
    if status is Status.ERROR:
        return f"the watchdog still cannot {verb} {subject} (for {firing_for})"
    if status is Status.BREACHED:
        return f"{subject} still breached (firing for {firing_for})"
    if status is Status.NO_DATA and n.no_data:
        return f"{subject} still has no data since {no_data_since} (firing for {firing_for})"
    if status is Status.NO_DATA:
        # Never quote "nothing to judge" as if it were the breach.
        return (
            f"{subject} still firing (for {firing_for}), but no data since {no_data_since}:"
            f" the {'error' if n.is_error else 'breach'} can be neither confirmed nor resolved"
        )
    return f"{subject} still firing (for {firing_for}; latest evaluation: {status.value})"


def _label(n: Notification) -> tuple[str, str]:
    """The announcement's label and icon: what kind of news, for what cause."""
    if n.kind is Kind.RESOLVE:
        return "Resolved", ":large_green_circle:"
    icon = ":warning:" if n.is_error else ":grey_question:" if n.no_data else ""
    if n.kind in (Kind.REPEAT, Kind.REFRESH):
        return "Still firing", icon or ":large_orange_circle:"
    label = "Error" if n.is_error else "No data" if n.no_data else "Firing"
    return label, icon or ":red_circle:"


def _evidence(result: CheckResult) -> tuple[str, list[str], int, list[str]]:
    """The first id list (what the ids are, the first five, how many more) and the facts."""
    shown = result.evidence.shown()
    kind, ids = "", []
    if shown.ids:
        kind, ids = shown.ids[0].noun, [_clip(i, MAX_ID) for i in shown.ids[0].ids]
    more = max(0, len(ids) - MAX_EVIDENCE)
    if kind == "sessions" and result.value is not None and result.unit == "count":
        more = max(more, int(result.value) - MAX_EVIDENCE)
    facts = [_clip(f"{fact.label}: {fact.text}", 200) for fact in shown.facts]
    return kind, ids[:MAX_EVIDENCE], more, facts


def alert_context(n: Notification) -> dict[str, Any]:
    """What a template knows about one announcement (every value a string, list or int)."""
    result = n.result
    label, icon = _label(n)
    resolve = n.kind is Kind.RESOLVE
    kind, ids, more, facts = _evidence(result) if not resolve else ("", [], 0, [])
    note = "a silence held this until now" if n.after_silence else ""
    if n.after_inhibition and not note:
        note = f"held while {n.after_inhibition} fired, until now"
    # The pseudo checks `store` and `run` compare nothing: no value, no "breach when".
    store = n.check_id in (STORE_CHECK, RUN_CHECK)
    summary = _clip(result.summary, MAX_SUMMARY).rstrip(".")
    if n.kind in (Kind.REPEAT, Kind.REFRESH) and result.status is Status.NO_DATA and not n.no_data:
        summary = f"latest window: {summary}"  # what the window lacked, not the breach
    return {
        "kind": n.kind.value,
        "label": label,
        "icon": icon,
        "check_id": n.check_id,
        "subject": _subject(n),
        "headline": _headline(n),
        "error": n.is_error,
        "status": result.status.value,
        "severity": result.severity.value,
        "value": "" if store else format_value(result, result.value),
        "target": "" if store else format_target(result),
        "window": format_window(n.window),
        "summary": summary,
        "evidence_kind": kind,
        "evidence": ids,
        "evidence_more": more,
        "facts": facts,
        "since": rfc3339(n.firing_since) if n.firing_since else "—",
        "fired_for": _duration(n.fired_for) if resolve else "",
        "no_data_since": rfc3339(n.no_data_since) if n.no_data_since else "",
        "note": note,
    }


_KIND_RANK = {Kind.FIRE: 0, Kind.REPEAT: 1, Kind.REFRESH: 1, Kind.RESOLVE: 2}
_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def ordered(notifications: Sequence[Notification]) -> list[Notification]:
    """A firing telemetry_freshness first (the telemetry stopped: the rest judge its gap), then
    new alerts, reminders, resolutions; critical first within each."""

    def key(n: Notification) -> tuple[bool, int, int]:
        stale = n.check_id == FRESHNESS_CHECK_ID and n.kind is not Kind.RESOLVE
        return not stale, _KIND_RANK[n.kind], _SEVERITY_RANK[n.severity]

    return sorted(notifications, key=key)


def message_context(notifications: Sequence[Notification], link: str = "") -> dict[str, Any]:
    """The context of one message: every announcement of one evaluation of one source.

    `link` is the window's page (`report.base_url`, see watchdog.core.links), or ''.
    """
    return message_context_of(stored_context(notifications, link))


def stored_context(notifications: Sequence[Notification], link: str = "") -> dict[str, Any]:
    """What a message is rendered from, as JSON the outbox keeps beside it: the evaluation's
    facts and every announcement's context, in order (a send that leaves some alerts out,
    a silence added since, renders it again without them)."""
    if not notifications:
        raise ValueError("a message needs at least one notification")
    first = notifications[0]
    return {
        "source": first.source,
        "window": format_window(first.window),
        "evaluated_at": rfc3339(first.at),
        "link": link,
        "alerts": [alert_context(n) for n in ordered(notifications)],
    }


# The keys of a stored context besides its alerts, as JSON types (alerts.base.read_object).
_STORED_TYPES: Mapping[str, type] = {"source": str, "window": str, "evaluated_at": str, "link": str}


@functools.cache
def _alert_context_types() -> Mapping[str, type]:
    """Each key of `alert_context` and the JSON type of its value (str, bool, int, list)."""
    return {key: type(value) for key, value in alert_context(sample_notifications()[0]).items()}


def read_stored_context(stored: object) -> dict[str, Any]:
    """A stored context (`stored_context`) read back from an outbox payload: the keys this
    version writes, each of its type; `UnreadablePayload` naming the first that is not."""
    shape = _alert_context_types()
    values = read_object(stored, _STORED_TYPES, "payload.context", required=_STORED_TYPES)
    alerts = stored.get("alerts") if isinstance(stored, Mapping) else None
    if not isinstance(alerts, list) or not alerts:
        raise UnreadablePayload("payload.context.alerts: not a list of alerts")
    return {
        **values,
        "alerts": [
            read_object(a, shape, f"payload.context.alerts[{i}]", required=shape)
            for i, a in enumerate(alerts)
        ],
    }


def message_context_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The template context of a stored context (`stored_context`): the counts, the title."""
    alerts = list(stored["alerts"])
    firing = sum(1 for a in alerts if a["kind"] != Kind.RESOLVE.value)
    resolved = len(alerts) - firing
    parts = [f"{firing} firing"] if firing else []
    parts += [f"{resolved} resolved"] if resolved else []
    return {
        **stored,
        "title": f"memory-watchdog: {', '.join(parts)}",
        "emoji": ":rotating_light:" if firing else ":white_check_mark:",
        "firing": firing,
        "resolved": resolved,
        "alerts": alerts[:MAX_ALERTS],
        "more": max(0, len(alerts) - MAX_ALERTS),
    }


def test_context(source: str, notifier: str, now: datetime) -> dict[str, Any]:
    return {"source": source, "notifier": notifier, "sent_at": rfc3339(now)}


# --- the environments ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """One message in the three forms notifiers need."""

    blocks: list[dict[str, Any]]
    text: str  # Slack's `text` fallback: mrkdwn-escaped
    plain: str  # the same text unescaped, for stdout


def _template_line(exc: BaseException, name: str) -> str:
    """`name:line` from the traceback Jinja rewrites to point into the template."""
    line = getattr(exc, "lineno", None)
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(name):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{name}:{line}" if line else name


class Templates:
    """The three StrictUndefined environments over one loader, checked when built.

    Escaping is the environments' job, not the templates': every `{{ value }}`
    goes through the environment's `finalize`, which makes it printable and
    escapes Slack mrkdwn (`&`, `<`, `>`: `<!channel>` cannot ping, `<url|x>`
    cannot forge a link) and, for Block Kit, JSON-escapes it for a JSON string.
    The templates see preformatted strings (statuses, values, counts, summaries,
    opaque ids), never an event payload value; rendering them once against a
    sample using every field makes a typo a config error naming file and line.
    """

    def __init__(self, templates_dir: str | None = None) -> None:
        self.templates_dir = templates_dir
        loaders: list[FileSystemLoader] = []
        if templates_dir:
            directory = Path(templates_dir).expanduser()
            if not directory.is_dir():
                raise ConfigError("alerts.templates_dir", f"{templates_dir} is not a directory")
            loaders.append(FileSystemLoader(str(directory)))
        loaders.append(FileSystemLoader(str(BUILTIN_DIR)))
        loader = ChoiceLoader(loaders)

        def env(finalize: Callable[[Any], str] | None, *, mrkdwn: bool) -> Environment:
            environment = Environment(
                loader=loader,
                undefined=StrictUndefined,
                autoescape=False,
                trim_blocks=True,
                lstrip_blocks=True,
                keep_trailing_newline=False,
                finalize=finalize,
            )
            # Whether the text renders for Slack (links as <url>) or for a plain channel.
            environment.globals["mrkdwn"] = mrkdwn
            return environment

        self._blocks = env(_finalize_blocks, mrkdwn=True)
        self._mrkdwn = env(_finalize_mrkdwn, mrkdwn=True)
        self._plain = env(_text, mrkdwn=False)
        self._verify()

    def _fail(self, name: str, exc: BaseException) -> ConfigError:
        where = f"{self.templates_dir}/" if self.templates_dir else "built-in "
        detail = exc.message if isinstance(exc, TemplateError) and exc.message else str(exc)
        return ConfigError("alerts.templates_dir", f"{where}{_template_line(exc, name)}: {detail}")

    def _render(self, environment: Environment, name: str, context: Mapping[str, Any]) -> str:
        try:
            return environment.get_template(name).render(context)
        except TemplateNotFound as exc:
            raise self._fail(name, exc) from None
        except TemplateSyntaxError as exc:
            raise self._fail(name, exc) from None
        except TemplateError as exc:
            raise self._fail(name, exc) from None

    def _blocks_of(self, name: str, context: Mapping[str, Any]) -> list[dict[str, Any]]:
        raw = self._render(self._blocks, name, context)
        try:
            document = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise self._fail(name, ValueError(f"does not render valid JSON: {exc}")) from None
        blocks = document.get("blocks") if isinstance(document, dict) else None
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise self._fail(name, ValueError('must render a JSON object {"blocks": [...]}'))
        if len(blocks) > 50:
            raise self._fail(name, ValueError(f"renders {len(blocks)} blocks; Slack allows 50"))
        return blocks

    def render(self, blocks: str, text: str, context: Mapping[str, Any]) -> Rendered:
        return Rendered(
            blocks=self._blocks_of(blocks, context),
            text=self._render(self._mrkdwn, text, context).strip(),
            plain=self._render(self._plain, text, context).strip(),
        )

    def message(self, notifications: Sequence[Notification], link: str = "") -> Rendered:
        """One evaluation's announcements as one message, linking to the window's page if `link`."""
        return self.render(MESSAGE_BLOCKS, MESSAGE_TEXT, message_context(notifications, link))

    def stored_message(self, stored: Mapping[str, Any]) -> Rendered:
        """The message of a stored context (`stored_context`), as `message` renders it."""
        return self.render(MESSAGE_BLOCKS, MESSAGE_TEXT, message_context_of(stored))

    def test_message(self, source: str, notifier: str, now: datetime) -> Rendered:
        return self.render(TEST_BLOCKS, TEST_TEXT, test_context(source, notifier, now))

    def _verify(self) -> None:
        """Render every template once against a sample that uses every field."""
        sample = sample_notifications()
        self.message(sample, link=SAMPLE_LINK)
        self.message(sample[-1:])
        self.test_message("joelclaw.otel_events", "slack", sample[0].at)


@functools.lru_cache(maxsize=8)
def templates(templates_dir: str | None = None) -> Templates:
    """The environments for a templates directory, built (and checked) once."""
    return Templates(templates_dir)


def _sample_result(check_id: str, status: Status, **fields: Any) -> CheckResult:
    """A result for the template sample: a critical count check unless `fields` say otherwise."""
    base: dict[str, Any] = {
        "value": 7.0,
        "target": 0.0,
        "severity": Severity.CRITICAL,
        "sample_size": 412,
        "summary": "7 of 412 sessions started without recall",
        "evidence": Evidence(sessions=("s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "s-7")),
        "comparison": Comparison.GT,
        "unit": "count",
    }
    base.update(fields)
    return CheckResult(id=check_id, status=status, **base)


def sample_notifications() -> list[Notification]:
    """A fire, an error, a repeat and a resolve: what checking a template renders."""
    at = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
    window = Window(at=at, length=timedelta(hours=4), lookback=timedelta(hours=24))
    source = "joelclaw.otel_events"
    # Every kind of evidence fact at once, so a template's use of any of them is checked.
    every_fact = Evidence(
        events=("e1", "e2"),
        failed=2,
        kinds=(("extra_key", 2),),
        run=FailureRun(at - timedelta(minutes=3), at - timedelta(minutes=1), 4),
        newest=at - timedelta(seconds=2),
    )
    error = _sample_result(
        "circuit_breaker",
        Status.ERROR,
        value=None,
        evidence=Evidence(),
        summary="could not evaluate: query timed out",
    )
    repeat = _sample_result(
        "agent_deviation_contract", Status.BREACHED, value=2.0, evidence=every_fact
    )
    resolved = _sample_result(
        "recall_latency_p95",
        Status.OK,
        value=1200.0,
        target=3000.0,
        unit="ms",
        comparison=Comparison.GE,
        severity=Severity.WARNING,
        evidence=Evidence(),
    )
    fire = _sample_result("recall_coverage", Status.BREACHED)
    return [
        Notification(Kind.FIRE, source, fire.id, Cause.BREACHED, fire, window, at),
        Notification(Kind.FIRE, source, error.id, Cause.ERROR, error, window, at),
        Notification(
            Kind.REPEAT,
            source,
            repeat.id,
            Cause.BREACHED,
            repeat,
            window,
            at - timedelta(days=1),
            after_silence=True,
        ),
        Notification(
            Kind.RESOLVE,
            source,
            resolved.id,
            Cause.BREACHED,
            resolved,
            window,
            at - timedelta(hours=8),
            fired_for=timedelta(hours=8),
        ),
    ]
