"""One session explained, for people (text) and scripts (JSON).

The events first (time, name, event id, outcome, latency, and what each
check counts against them), then the obligations by deadline: what
triggered each, when it was due, what met it or `missed`, and the check and
window that counted it (`not yet due` when its deadline is at or after
`at`; the fields: docs/spec.md#9-looking-back-backtest-and-explain). Every
id and name from the data is printed through `watchdog.core.text.printable`:
a hostile one cannot rewrite the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from checks.explain import Explained, Had
from watchdog.core import jsontext
from watchdog.core.durations import format_duration, human_duration
from watchdog.core.settings import EventSettings
from watchdog.core.text import plural, printable, shell_word
from watchdog.core.times import rfc3339

ID_CHARS = 100  # an id longer than this is cut in the text (JSON keeps it whole)
COMMAND_ID_CHARS = 1000  # a printed command's id, quoted, at most this long (else not printed)
# The window of the schedule that judges a deadline, for a check of the given own window
# length (None: the run's): (start, end).
WindowOf = Callable[[datetime, int | None], tuple[datetime, datetime]]

# What an event's role says of it (docs/spec.md section 3), in the report's words.
ROLE_WORDS = (
    ("recall_started", "recall started"),
    ("recall_completed", "completed"),
    ("recall_failed", "failed"),
    ("recall_injected", "injected"),
    ("observe_requested", "observe requested"),
    ("observe_completed", "completed"),
    ("observe_failed", "failed"),
    ("session_end", "session end"),
    ("compaction", "compaction"),
    ("gate_decision", "gate decision"),
    ("agent_deviation", "deviation"),
    ("human_message", "human message"),
    ("agent_response", "response"),
)


def explain_command(
    session_id: str, at: datetime, flags: str = "", length: timedelta | None = None
) -> str:
    """The `memory-watchdog explain` of a listed session, as the window ending `at` (`length`
    long: the window the check judged) saw it, with the `flags` that read what the run read
    (`command_flags`: its --config, its --store).

    The id is one shell word that bash reads back byte for byte and a terminal shows as it is
    (`shell_word`: `$'...'` for controls and bidi characters). An id whose word would be
    longer than COMMAND_ID_CHARS is not printed: a line that long would fill the terminal,
    and a cut one would explain another session; the line says to take it from the JSON.
    """
    word = shell_word(session_id)
    if len(word) > COMMAND_ID_CHARS:
        word = f"<an id of {len(session_id)} characters: take it from --format json>"
    command = f"memory-watchdog explain {word} --at {rfc3339(at)}"
    if length is not None:
        command += f" --window {format_duration(length)}"
    return f"{command} {flags}" if flags else command


def outcomes(events: EventSettings) -> dict[str, str]:
    """Event name -> its role's word, from the configured roles."""
    found: dict[str, str] = {}
    for role, word in ROLE_WORDS:
        for name in getattr(events, role):
            found.setdefault(name, word)
    return found


@dataclass(frozen=True)
class Judgement:
    """An obligation as the report states it: met, missed, or not yet due; where counted."""

    status: str  # met | missed | not yet due | not judged
    window: tuple[datetime, datetime] | None


def judgement(had: Had, at: datetime, window_of: WindowOf) -> Judgement:
    if had.deadline >= at:
        return Judgement("not yet due", None)
    window = window_of(had.deadline, had.window_ms)
    if not had.judged:
        return Judgement("not judged", window)
    return Judgement("met" if had.met_by else "missed", window)


# What a deadline counts from, by anchor (a silent end is never late: see checks.explain).
_FROM = {"start": "the first event", "end": "the end event"}


def _lateness(had: Had) -> str:
    """`late by 42s (deadline 5m after the first event)`: how late the late event came."""
    assert had.late is not None
    by = human_duration((had.late.time - had.deadline).total_seconds())
    due = human_duration((had.deadline - had.trigger_time).total_seconds())
    return f"late by {by} (deadline {due} after {_FROM[had.obligation.anchor]})"


def _trigger(had: Had) -> str:
    if had.trigger_id:
        return f"{printable(had.trigger_id, ID_CHARS)} at {rfc3339(had.trigger_time)}"
    if had.obligation.anchor == "start":
        return f"first event at {rfc3339(had.trigger_time)}"
    return f"last event at {rfc3339(had.trigger_time)}"


def to_json(
    explained: Explained, source: str, events: EventSettings, window_of: WindowOf
) -> dict[str, Any]:
    at = explained.window.at
    words = outcomes(events)
    obligations = []
    for had in explained.obligations:
        judged = judgement(had, at, window_of)
        obligations.append(
            {
                "check": had.check_id,
                "obligation": had.label,
                "trigger": {
                    "event_id": had.trigger_id or None,
                    "time": rfc3339(had.trigger_time),
                },
                "deadline": rfc3339(had.deadline),
                "met_by": had.met_by or None,
                "status": judged.status,
                "late": (
                    {
                        "event_id": had.late.event_id,
                        "time": rfc3339(had.late.time),
                        "by_s": (had.late.time - had.deadline).total_seconds(),
                    }
                    if had.late is not None and judged.status == "missed"
                    else None
                ),
                "window": (
                    {"start": rfc3339(judged.window[0]), "end": rfc3339(judged.window[1])}
                    if judged.window
                    else None
                ),
            }
        )
    return {
        "schema_version": 1,
        "session_id": explained.session_id,
        "event_id": explained.marked or None,
        "source": source,
        "at": rfc3339(at),
        "read": {"from": rfc3339(explained.window.read_from), "to": rfc3339(at)},
        "window": {"start": rfc3339(explained.window.start), "end": rfc3339(at)},
        "events_total": explained.total_events,
        "events": [
            {
                "time": rfc3339(e.time),
                "name": e.name,
                "event_id": e.event_id,
                "outcome": words.get(e.name, ""),
                "latency_ms": e.latency_ms,
                "counted_by": [{"check": f.check_id, "as": f.words} for f in e.findings],
                "marked": e.event_id == explained.marked,
            }
            for e in explained.events
        ],
        "obligations": obligations,
    }


def render_explain_json(
    explained: Explained, source: str, events: EventSettings, window_of: WindowOf
) -> str:
    document = to_json(explained, source, events, window_of)
    return jsontext.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _judged_line(explained: Explained) -> str:
    """Which window the obligations are counted in: the one `check --at` judges, or earlier."""
    window = explained.window
    return (
        f"check --at {rfc3339(window.at)} --window {format_duration(window.length)} judges the"
        f" window {rfc3339(window.start)} .. {rfc3339(window.end)}: an obligation due in it is"
        " counted there, one due earlier in the schedule's window that judged it"
    )


def render_explain_text(
    explained: Explained, source: str, events: EventSettings, window_of: WindowOf
) -> str:
    """The session's story: events, what counts against them, then its obligations."""
    at = explained.window.at
    words = outcomes(events)
    shown = len(explained.events)
    listed = (
        f"{plural(explained.total_events, 'event')}"
        if shown == explained.total_events
        else f"{explained.total_events} events, the oldest {shown} shown (--format json: the same)"
    )
    out = [
        f"memory-watchdog explain: session {printable(explained.session_id, ID_CHARS)}"
        + (
            f" (of event {printable(explained.marked, ID_CHARS)}, marked >>)"
            if explained.marked
            else ""
        )
        + f"  source {printable(source)}",
        f"read from {rfc3339(explained.window.read_from)} to {rfc3339(at)}"
        f" (the lookback of check --at {rfc3339(at)}): {listed}, oldest first",
        _judged_line(explained),
        "",
        f"{'time':<25} {'name':<34} {'event id':<28} {'outcome':<18} latency",
    ]
    for e in explained.events:
        latency = f"{e.latency_ms:.0f} ms" if e.latency_ms is not None else ""
        mark = "  >> the event asked about" if e.event_id == explained.marked else ""
        out.append(
            f"{rfc3339(e.time):<25} {printable(e.name, 64):<34}"
            f" {printable(e.event_id, ID_CHARS):<28} {words.get(e.name, ''):<18} {latency}".rstrip()
            + mark
        )
        for f in e.findings:
            out.append(f"    counted by {f.check_id}: {printable(f.words, 200)}")
    out += ["", "Obligations (by deadline):"]
    if not explained.obligations:
        out.append("  none within the lookback")
    for had in explained.obligations:
        judged = judgement(had, at, window_of)
        where = f"{had.check_id}"
        if judged.window and judged.status != "not judged":
            where += f", window {rfc3339(judged.window[0])} .. {rfc3339(judged.window[1])}"
        if judged.status == "not judged":
            where += " (the session is outside its scope)"
        late = had.late if judged.status == "missed" else None
        status = f"missed, {_lateness(had)}" if late is not None else judged.status
        if judged.status == "not yet due" and had.met_by:  # met before its deadline
            status = "met already, not yet due: the window of its deadline judges it"
        out.append(f"  {had.label}: {status} - {where}")
        met = f", met by {printable(had.met_by, ID_CHARS)}" if had.met_by else ""
        out.append(f"    trigger {_trigger(had)}, due {rfc3339(had.deadline)}{met}")
        if late is not None:
            out.append(f"    late: {printable(late.event_id, ID_CHARS)} at {rfc3339(late.time)}")
    return "\n".join(out) + "\n"
