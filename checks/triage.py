"""The triage breakdown: what the on-call person asks next about a breached check.

For each breached check, its failing items (failed and lost operations,
slow recalls, discarded gate decisions, broken deviation events, the
sessions that missed an obligation) are grouped by the dimensions the
source offers (joelclaw: `source`, `component`, `error`; otel_logs:
`ServiceName`, `SeverityText`; otel_traces: `ServiceName`, `StatusMessage`),
top 10 per dimension with counts and shares. Coverage checks also list their
sessions (at most 20, oldest first) with first and last seen, event count
and the obligations they missed.

All grouping runs in ClickHouse; Python gets the top groups back. Free text
(`error`, `StatusMessage`) appears only as normalised classes: ids, numbers,
quoted values, URLs and e-mail addresses are stripped and the class is cut to
120 characters, and only when `report.error_classes` is on, since error
strings can carry user data. Payload values never leave the store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from checks.base import CheckResult, Report, Status, Window
from checks.breakdown import TOP, Dimension, Group, Triage
from checks.builtin import configured_checks
from checks.deviation import classified, contract_params
from checks.events import numeric_field
from checks.kinds import (
    CheckSpec,
    Coverage,
    DeviationContract,
    DeviationEvidence,
    OutcomeRate,
    Quantile,
    Share,
    Streak,
)
from checks.session_triage import coverage_triage
from checks.sessions import build
from checks.sources import CompiledSource, open_source
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import to_ms

log = logging.getLogger(__name__)

CLASS_CHARS = 120
# Dimensions holding free text: shown only as normalised error classes.
FREE_TEXT = frozenset({"error", "StatusMessage"})
LOST_CLASS = "(lost: no outcome within the grace period)"

# Applied in order by `error_class`; bound as parameters (RE2 syntax).
NORMALISE = (
    ("tr_re_url", r"(?i)\b[a-z][a-z0-9+.-]*://\S+", "<url>"),
    ("tr_re_email", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", "<email>"),
    ("tr_re_quoted", r"\"[^\"]*\"|'[^']*'|`[^`]*`", "<q>"),
    (
        "tr_re_uuid",
        r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
        "<id>",
    ),
    ("tr_re_prefixed", r"\b[A-Za-z]+[-_:][\w-]*\d[\w-]*", "<id>"),
    ("tr_re_hex", r"\b[0-9a-fA-F]{8,}\b", "<id>"),
    ("tr_re_number", r"\b\d+(?:\.\d+)?(?:ms|s|m|h|d|%)?\b", "<n>"),
    ("tr_re_token", r"[\w.:/-]*\d[\w.:/-]*", "<id>"),
    ("tr_re_space", r"\s+", " "),
)


def error_class(column: str) -> str:
    """SQL: free text normalised into a class, so messages differing only in ids merge."""
    expr = column
    for name, _, replacement in NORMALISE:
        expr = f"replaceRegexpAll({expr}, {{{name}:String}}, '{replacement}')"
    return f"leftUTF8(trimBoth({expr}), {CLASS_CHARS})"


def _normalise_params() -> dict[str, str]:
    return {name: pattern for name, pattern, _ in NORMALISE}


def _dims(source: CompiledSource, error_classes: bool) -> list[str]:
    """The dimensions to group by: free text only when error classes are wanted."""
    return [name for name in source.dims if error_classes or name not in FREE_TEXT]


def _events_in_window(
    source: CompiledSource, dims: Sequence[str], condition: str, outcome: str = ""
) -> str:
    """Items: the events of W meeting `condition`, one row per event id, with their dimensions."""
    columns = "".join(f", any(dim_{d}) AS dim_{d}" for d in dims)
    label = f", '{outcome}' AS dim_outcome" if outcome else ""
    return (
        f"SELECT event_id AS item, any(t) AS t{columns}{label}"
        f" FROM (SELECT * FROM {source.events_with_dims()}"
        f" WHERE t >= {{ws_ms:Int64}} AND ({condition})) GROUP BY event_id"
    )


def _lost(source: CompiledSource, dims: Sequence[str], p: OutcomeRate) -> str:
    """Items: started events of a real session whose outcome obligation is due in W and unmet."""
    fields = ", ".join(["t", "event_id", *(f"dim_{d}" for d in dims)])
    columns = "".join(
        f", '{LOST_CLASS}' AS dim_{d}" if d in FREE_TEXT else f", m.{i + 3} AS dim_{d}"
        for i, d in enumerate(dims)
    )
    g = "{tr_grace:Int64}"
    return f"""
SELECT m.2 AS item, m.1 AS t{columns}, 'lost' AS dim_outcome
FROM (
  SELECT
    groupUniqArrayIf(({fields}), name IN {{tr_started:Array(String)}}) AS starts,
    groupArrayIf(t, name IN {{tr_outcomes:Array(String)}}) AS outcomes
  FROM {source.events_with_dims()}
  WHERE session_id != ''
  GROUP BY session_id
)
ARRAY JOIN arrayFilter(
  c -> c.1 + {g} >= {{ws_ms:Int64}} AND c.1 + {g} < {{at_ms:Int64}}
    AND NOT arrayExists(x -> x >= c.1 AND x <= c.1 + {g}, outcomes),
  starts) AS m"""


def _event_items(
    source: CompiledSource,
    dims: list[str],
    spec: CheckSpec,
    result: CheckResult,
) -> tuple[str, dict[str, Any], list[str]] | None:
    """The items SQL, its parameters and dimensions for a check whose failing items are events."""
    p = spec.params
    if isinstance(p, OutcomeRate):
        params = {
            "tr_failed": list(p.failed),
            "tr_started": list(p.started),
            "tr_outcomes": list(p.completed + p.failed),
            "tr_grace": p.grace_ms,
        }
        failed = _events_in_window(
            source, dims, "name IN {tr_failed:Array(String)}", outcome="failed"
        )
        return f"{failed}\nUNION ALL\n{_lost(source, dims, p)}", params, ["outcome", *dims]
    if isinstance(p, Quantile):
        value = numeric_field(p.field, "tr_field_key")
        condition = f"name IN {{tr_names:Array(String)}} AND {value} >= {{tr_target:Float64}}"
        params = {
            "tr_names": list(p.events),
            "tr_target": float(spec.target),
            "tr_field_key": p.field.removeprefix("payload."),
        }
        return _events_in_window(source, _plain(dims), condition), params, _plain(dims)
    if isinstance(p, Streak):
        run = result.evidence.run
        if run is None:
            return None
        params = {"tr_bad": list(p.bad), "tr_from": to_ms(run.start), "tr_to": to_ms(run.end)}
        condition = "name IN {tr_bad:Array(String)} AND t >= {tr_from:Int64} AND t <= {tr_to:Int64}"
        return _events_in_window(source, dims, condition), params, dims
    if isinstance(p, Share):
        condition = (
            "name IN {tr_names:Array(String)}"
            " AND JSONExtractString(payload, {tr_field:String}) = {tr_value:String}"
        )
        params = {"tr_names": list(p.events), "tr_field": p.field, "tr_value": p.value}
        return _events_in_window(source, _plain(dims), condition), params, _plain(dims)
    if isinstance(p, DeviationContract):
        broken = f"SELECT event_id FROM ({classified(source)}) WHERE length(kinds) > 0"
        condition = f"name IN {{dev_names:Array(String)}} AND event_id IN ({broken})"
        return (
            _events_in_window(source, _plain(dims), condition),
            contract_params(p),
            _plain(dims),
        )
    if isinstance(p, DeviationEvidence):
        citing = f"""
WITH cited AS (
  SELECT event_id, arrayJoin(ids) AS cited_id FROM ({classified(source)}) WHERE length(kinds) = 0
)
SELECT event_id FROM cited WHERE cited_id NOT IN (
  SELECT event_id FROM {source.events()} WHERE event_id IN (SELECT cited_id FROM cited)
)"""
        condition = f"name IN {{dev_names:Array(String)}} AND event_id IN ({citing})"
        return (
            _events_in_window(source, _plain(dims), condition),
            contract_params(p.contract),
            _plain(dims),
        )
    return None


def _plain(dims: Sequence[str]) -> list[str]:
    """Dimensions other than free text: events that did not fail carry no error to classify."""
    return [d for d in dims if d not in FREE_TEXT]


def carried_dims(source: CompiledSource) -> list[str]:
    """The dimensions the session and window queries carry for triage (no free text).

    `checks.evaluate` given these puts the breakdown of breached coverage,
    quantile and share checks in the report; `with_triage` adds the rest.
    """
    return _plain(list(source.dims))


def _coverage(
    store: Store, source: CompiledSource, window: Window, spec: CheckSpec, dims: list[str]
) -> Triage:
    """A coverage check's failing sessions, by dimension and the oldest 20: the session query
    for it alone, carrying its triage (what the evaluation does when asked to)."""
    plain = _plain(dims)
    b, plan = build([spec], plain)
    params = {**source.params, **window.params(), **b.params}
    row = store.aggregate(b.sql(source.with_dims()), params)
    return coverage_triage(spec, row, plan.triaged[spec.id], plain)


def _group(store: Store, items_sql: str, dims: Sequence[str], params: Mapping[str, Any]) -> Triage:
    """Count the items, and the top groups of each dimension with their counts and shares."""
    pairs = ", ".join(
        ["('', '')"]
        + [f"('{d}', {error_class(f'dim_{d}') if d in FREE_TEXT else f'dim_{d}'})" for d in dims]
    )
    sql = f"""
SELECT dimension, value, n FROM (
  SELECT d.1 AS dimension, d.2 AS value, count() AS n
  FROM ({items_sql})
  ARRAY JOIN [{pairs}] AS d
  GROUP BY dimension, value
)
ORDER BY dimension, n DESC, value
LIMIT {TOP} BY dimension"""
    rows = store.query(sql, {**params, **_normalise_params()}).rows
    total = next((int(n) for dim, _, n in rows if dim == ""), 0)
    groups: dict[str, list[Group]] = {d: [] for d in dims}
    for dim, value, n in rows:
        if dim:
            share = int(n) / total if total else 0.0
            groups[str(dim)].append(Group(str(value), int(n), share))
    dimensions = tuple(Dimension(d, tuple(g)) for d, g in groups.items() if g)
    return Triage(items=total, noun="events", dimensions=dimensions)


def breakdown(
    store: Store,
    source: CompiledSource,
    window: Window,
    spec: CheckSpec,
    result: CheckResult,
    *,
    error_classes: bool = True,
) -> Triage | None:
    """The triage breakdown of one breached check, or None when it has no items to group."""
    dims = _dims(source, error_classes)
    window = spec.window_for(window)
    if isinstance(spec.params, Coverage):
        return _coverage(store, source, window, spec, dims)
    found = _event_items(source, dims, spec, result)
    if found is None:
        return None
    items_sql, params, used = found
    return _group(store, items_sql, used, {**source.params, **window.params(), **params})


def triage(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    report: Report,
    *,
    error_classes: bool = True,
) -> dict[str, Triage]:
    """The breakdown of every breached check of `report`; one that cannot run says so."""
    out: dict[str, Triage] = {}
    for spec in specs:
        result = report.checks.get(spec.id)
        if result is None or result.status is not Status.BREACHED:
            continue
        try:
            found = breakdown(store, source, window, spec, result, error_classes=error_classes)
        except StoreError as exc:
            log.warning("triage of %s could not run: %s", spec.id, exc.problem)
            found = Triage.failed(exc.problem)
        if found is not None:
            out[spec.id] = found
    return out


def with_triage(store: Store, settings: Settings, report: Report) -> Report:
    """The report with its triage breakdown, computed on the configured source.

    What the evaluation carried already (`run_once(..., triage=True)`) is kept;
    the breached checks it did not carry get a query each.
    """
    source = open_source(store, settings.source)
    specs = configured_checks(settings)
    found = triage(
        store,
        source,
        report.window,
        [spec for spec in specs if spec.id not in report.triage],  # not carried already
        report,
        error_classes=settings.report.error_classes,
    )
    carried = {**report.triage, **found}
    return replace(report, triage={s.id: carried[s.id] for s in specs if s.id in carried})
