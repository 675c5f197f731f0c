"""One session explained: its events, what each check counts against them, its obligations.

`explain_session` reads the events of one session in `[at - lookback, at)`
(each event id once, oldest first), with what each check counts against
each of them (the kinds' `flag`: a failed outcome, a slow recall, a
deviation that breaks the contract...), and every obligation the session
had (the kinds' `obligations`, listed by the rule the checks judge with:
`checks.kinds.obligations.listed`): its trigger, its deadline, the event
that met it or none, and whether the check judges this session at all
(docs/spec.md#9-looking-back-backtest-and-explain). Three reads of the
lookback at most: the events, the obligations, and (when a deviation cites
evidence) the cited ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from checks.base import CheckSpec, Window
from checks.kinds import kind_of
from checks.kinds.base import Flag
from checks.kinds.obligations import Anchor, Obligation, listed
from checks.scans.binder import Binder, merged
from checks.scans.session import SessionScan
from checks.sources import CompiledSource
from watchdog.core.store import Store
from watchdog.core.times import from_ms

EVENTS = 1000  # the events listed, oldest first; the total is counted


@dataclass(frozen=True)
class Finding:
    """A check counting one event against itself, in words."""

    check_id: str
    words: str


@dataclass(frozen=True)
class SessionEvent:
    time: datetime
    name: str
    event_id: str
    latency_ms: float | None
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Had:
    """One obligation of the session: what triggered it, its deadline, what met it."""

    check_id: str
    obligation: Obligation
    trigger_time: datetime
    trigger_id: str  # '' for a start (the first event) and a silent end (the last one)
    deadline: datetime
    met_by: str  # the event id that met it, '' when none did
    judged: bool  # whether the check judges this session (real, in its scope)
    window_ms: int | None = None  # the check's own window length, when it has one
    late: SessionEvent | None = None  # missed: the first required event after the deadline

    @property
    def label(self) -> str:
        """In the words of docs/spec.md section 4, a silent end told apart."""
        silent = not self.trigger_id and self.obligation.anchor is Anchor.END
        return self.obligation.missed(silent=silent)


@dataclass(frozen=True)
class Explained:
    session_id: str
    window: Window  # read from window.read_from to window.at
    events: tuple[SessionEvent, ...]
    total_events: int
    obligations: tuple[Had, ...]
    marked: str = ""  # explained for this event id (`explain <event id>`): its session's story


def session_of_event(
    store: Store, source: CompiledSource, window: Window, event_id: str
) -> str | None:
    """The session of the event `event_id` of the lookback ('' for none), None when no event of
    the lookback has that id (bound, the preset's id hint filtered first)."""
    sql = source.events_source.select(
        "any(session_id)",
        where="(event_id_hint = '' OR event_id_hint = {ex_event:String})"
        " AND event_id = {ex_event:String}",
        group="event_id",
    )
    params = merged(source.events_source.params, window.params(), {"ex_event": event_id})
    rows = store.query(sql, params).rows
    return str(rows[0][0]) if rows else None


def _restricted(source: CompiledSource) -> CompiledSource:
    """The source's events of one session (`explain_session`, bound)."""
    return replace(source, where=f"({source.where}) AND session_id = {{explain_session:String}}")


def _flags(specs: Sequence[CheckSpec], bind: Binder) -> list[tuple[str, Flag]]:
    found = []
    for spec in specs:
        flag = kind_of(spec).flag(spec, bind)
        if flag is not None:
            found.append((spec.id, flag))
    return found


def _events(
    store: Store,
    source: CompiledSource,
    params: dict[str, Any],
    flags: list[tuple[str, Flag]],
    bind: Binder,
) -> tuple[list[dict[str, Any]], int]:
    """The session's events (each id once, oldest first, at most EVENTS) and their count."""
    columns = []
    for i, (_, flag) in enumerate(flags):
        named = f"name IN {bind.names(flag.names)}"
        columns.append(f"max({named} AND ({flag.condition})) AS f{i}")
        columns.append(f"anyIf({flag.words}, {named} AND ({flag.condition})) AS w{i}")
        if flag.cites:
            columns.append(f"anyIf({flag.cites}, {named}) AS c{i}")
    extra = "".join(f",\n  {c}" for c in columns)
    flag_params = merged(*(f.params for _, f in flags))
    listed = source.select(
        "event_id, any(t) AS _t, any(name) AS _name, any(latency_ms) AS _latency,"
        f"\n  count() OVER () AS _total{extra}",
        group="event_id",
    )
    sql = f"{listed}\nORDER BY _t, event_id\nLIMIT {EVENTS}"
    rows = store.query(sql, merged(params, flag_params, bind.values)).dicts()
    return rows, int(rows[0]["_total"]) if rows else 0


def _existing(
    store: Store, source: CompiledSource, params: dict[str, Any], ids: set[str]
) -> set[str]:
    """Which of `ids` are the id of some event of the lookback (any session)."""
    if not ids:
        return set()
    sql = source.select(
        "event_id",
        where="(event_id_hint = '' OR event_id_hint IN {ex_ids:Array(String)})"
        " AND event_id IN {ex_ids:Array(String)}",
        group="event_id",
    )
    rows = store.query(sql, merged(params, {"ex_ids": sorted(ids)})).rows
    return {str(row[0]) for row in rows}


def _findings(
    rows: list[dict[str, Any]], flags: list[tuple[str, Flag]], existing: set[str]
) -> list[SessionEvent]:
    found = []
    for row in rows:
        findings = []
        for i, (check_id, flag) in enumerate(flags):
            if not row[f"f{i}"]:
                continue
            if flag.cites and all(cited in existing for cited in row[f"c{i}"]):
                continue
            findings.append(Finding(check_id, str(row[f"w{i}"])))
        latency = row["_latency"]
        found.append(
            SessionEvent(
                time=from_ms(int(row["_t"])),
                name=str(row["_name"]),
                event_id=str(row["event_id"]),
                latency_ms=float(latency) if latency is not None else None,
                findings=tuple(findings),
            )
        )
    return found


def _obligations(
    store: Store, source: CompiledSource, params: dict[str, Any], specs: Sequence[CheckSpec]
) -> list[Had]:
    """Every obligation the session had, by check: listed in one session scan."""
    scan = SessionScan()
    plan: list[tuple[CheckSpec, Obligation, str, str]] = []
    for spec in specs:
        kind = kind_of(spec)
        obligations = kind.obligations(spec.params)
        if not obligations:
            continue
        judges = scan.total(f"judges_{len(plan)}", f"any({kind.judges(scan, spec)})")
        for ob in obligations:
            alias = listed(scan, scan.tag(), ob)
            plan.append((spec, ob, scan.total(f"{alias}_all", f"any({alias})"), judges))
    if not plan:
        return []
    row = store.aggregate(scan.render_raw(source), merged(params, scan.params()))
    if not int(row["events"] or 0):
        return []
    found = []
    for spec, ob, alias, judges in plan:
        for time, trigger_id, deadline, met_by in row[alias]:
            found.append(
                Had(
                    check_id=spec.id,
                    obligation=ob,
                    trigger_time=from_ms(int(time)),
                    trigger_id=str(trigger_id),
                    deadline=from_ms(int(deadline)),
                    met_by=str(met_by),
                    judged=bool(row[judges]),
                    window_ms=spec.window_ms,
                )
            )
    found.sort(key=lambda h: (h.deadline, h.check_id))
    return found


def explain_session(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    session_id: str,
) -> Explained:
    """The session's events of the lookback before `window.at` and every obligation it had."""
    enabled = [spec for spec in specs if spec.enabled]
    one = _restricted(source)
    params = merged(source.params, window.params(), {"explain_session": session_id})
    bind = Binder("x")
    flags = _flags(enabled, bind)
    rows, total = _events(store, one, params, flags, bind)
    cited = {
        str(i)
        for row in rows
        for n, (_, flag) in enumerate(flags)
        if flag.cites and row[f"f{n}"]
        for i in row[f"c{n}"]
    }
    existing = _existing(store, source, merged(source.params, window.params()), cited)
    events = _findings(rows, flags, existing)
    # Every obligation of the lookback: the scan's window as long as its lookback, so that
    # it reads the role events of all of it.
    whole = replace(window, length=window.lookback)
    listing = merged(source.params, whole.params(), {"explain_session": session_id})
    had = _obligations(store, one, listing, enabled) if rows else []
    return Explained(session_id, window, tuple(events), total, tuple(_late(had, events)))


def _late(had: Sequence[Had], events: Sequence[SessionEvent]) -> list[Had]:
    """Each missed start or end obligation with the event that came too late for it, if one
    did: the first of its required events after the deadline.

    Not a trigger's: a later event of those names may answer the next trigger (a compaction's
    observe, the end's); nor a silent end's: an observe after the last event would have been
    the last event.
    """
    found = []
    for h in had:
        anchor = h.obligation.anchor
        if h.met_by or anchor is Anchor.EVENT or (anchor is Anchor.END and not h.trigger_id):
            found.append(h)
            continue
        required = h.obligation.required
        late = next((e for e in events if e.name in required and e.time > h.deadline), None)
        found.append(replace(h, late=late))
    return found
