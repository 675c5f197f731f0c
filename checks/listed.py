"""The evidence's listed events made followable: each with its session, name, latency and error
class, looked up by id in one read for every report of an evaluation (`Evidence.details`;
docs/checks.md#memory-watchdog-check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from checks.base import Report, Window
from checks.evidence import ListedEvent
from checks.scans.binder import merged
from checks.sources import CompiledSource
from checks.triage import NORMALISE, error_class
from watchdog.core.errors import StoreError
from watchdog.core.store import Store


def with_event_details(
    store: Store, source: CompiledSource, reports: Sequence[Report], error_classes: bool = True
) -> list[Report]:
    """`reports` with the details of every event their evidence lists, read once over the
    reads of them all (the ids bound as a parameter, the preset's id hint filtered first).

    The error class is the `error` dimension as the triage normalises it, only with
    `error_classes`. A lookup the store refuses leaves the verdicts and the ids as they were,
    without details, and says so in each report's notes.
    """
    wanted = sorted(
        {i for r in reports for c in r.checks.values() for i in (c.evidence.events or ())}
    )
    if not wanted:
        return list(reports)
    events = source.events_source
    error = "''"
    if error_classes and "error" in events.dims:
        error = error_class("any(dim_error)")
    sql = events.select(
        "event_id, any(name) AS _name, any(session_id) AS _session,"
        f" any(latency_ms) AS _latency, {error} AS _error",
        where="(event_id_hint = '' OR event_id_hint IN {ev_ids:Array(String)})"
        " AND event_id IN {ev_ids:Array(String)}",
        group="event_id",
        dims=error != "''",
    )
    first = min(r.window.read_from for r in reports)
    last = max(r.window.at for r in reports)
    reach = Window(at=last, length=last - first, lookback=last - first)
    normalise = {name: pattern for name, pattern, _ in NORMALISE} if error != "''" else {}
    params = merged(events.params, reach.params(), {"ev_ids": wanted}, normalise)
    try:
        rows = store.query(sql, params).dicts()
    except StoreError as exc:
        note = f"the listed events' details could not be read ({exc.problem}): ids only"
        return [replace(r, notes=(*r.notes, note)) for r in reports]
    found = {
        str(row["event_id"]): ListedEvent(
            event_id=str(row["event_id"]),
            name=str(row["_name"]),
            session_id=str(row["_session"]),
            latency_ms=float(row["_latency"]) if row["_latency"] is not None else None,
            error_class=str(row["_error"]),
        )
        for row in rows
    }
    return [_detailed(report, found) for report in reports]


def _detailed(report: Report, found: dict[str, ListedEvent]) -> Report:
    checks = {}
    for check_id, result in report.checks.items():
        ids = result.evidence.events
        if ids:
            details = tuple(found.get(i, ListedEvent(i)) for i in ids)
            result = replace(result, evidence=replace(result.evidence, details=details))
        checks[check_id] = result
    return replace(report, checks=checks)
