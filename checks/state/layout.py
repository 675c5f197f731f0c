"""The session state's table (per source, hour and session: times, counts, scopes, the role and
flagged events), the view that fills it, what it keeps for a config (`Needs`, recorded in its
COMMENT) and its statements; docs/sources.md#the-session-state-sourcestate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checks.scans.session import Scope, SessionScan
from checks.sources import compile_source, unbounded_sql
from watchdog.core.settings import Settings
from watchdog.core.sql import literal
from watchdog.core.times import rfc3339, to_ms

STATE_TABLE = "session_state"
STATE_VIEW = "session_state_mv"
BUCKET_MS = 60 * 60 * 1000  # a state row per session and hour

# What the data-quality counts flag, one bit each (`flagged`).
NOT_OBJECT, INVALID_UTF8, LATENCY_INVALID = 1, 2, 4

EVENT = "Tuple(Int64, String, String, UInt8, Array(Tuple(String, String)))"
FLAGGED = "Tuple(Int64, String, String, UInt8)"
COLUMNS: dict[str, str] = {
    "source": "LowCardinality(String)",
    "bucket": "Int64",  # epoch ms at the start of the bucket
    "session_id": "String",  # before the ignore list
    "first_seen": "SimpleAggregateFunction(min, Int64)",
    "last_seen": "SimpleAggregateFunction(max, Int64)",
    "n_events": "SimpleAggregateFunction(sum, UInt64)",
    "scoped": "SimpleAggregateFunction(max, UInt8)",
    "scopes": "SimpleAggregateFunction(groupUniqArrayArray, Array(String))",
    # Every event's time: read only for the two buckets the lookback's ends cut.
    "times": "SimpleAggregateFunction(groupArrayArray, Array(Int64))",
    # (t, name, event id, has results, the payload fields a skip filter reads)
    "events": f"AggregateFunction(groupUniqArray, {EVENT})",
    # (t, name, event id, flags)
    "flagged": f"AggregateFunction(groupUniqArray, {FLAGGED})",
}
STATE_ROWS = (
    "scoped",
    "first_seen",
    "last_seen",
    "n_events",
    "scopes",
    "times",
    "events",
    "flagged",
)


@dataclass(frozen=True)
class Needs:
    """What the state keeps of each event, for a set of session scans."""

    names: tuple[str, ...]  # the event names some session rule reads
    skips: tuple[tuple[str, tuple[str, ...]], ...]  # (payload field, the names it is read for)
    scopes: tuple[tuple[str, str], ...]  # (check id, its session filter)

    @classmethod
    def of(cls, scans: Iterable[SessionScan]) -> Needs:
        names: set[str] = set()
        skips: dict[str, set[str]] = {}
        scopes: dict[str, str] = {}
        for scan in scans:
            for name_set in scan.sets.bits:
                names.update(name_set.names)
                if name_set.skip is not None:
                    skips.setdefault(name_set.skip.field, set()).update(name_set.names)
            for item in scan.inputs.values():
                if isinstance(item, Scope):
                    scopes[item.check_id] = item.predicate
        return cls(
            tuple(sorted(names)),
            tuple((f, tuple(sorted(n))) for f, n in sorted(skips.items())),
            tuple(sorted(scopes.items())),
        )

    def built_for(self, session_filter: str) -> dict[str, Any]:
        """What a state keeps, as recorded on its table and compared on every read."""
        return {
            "names": list(self.names),
            "skips": {field: list(names) for field, names in self.skips},
            "scopes": dict(self.scopes),
            "session_filter": session_filter,
        }


# The state table's COMMENT: this mark, then what its view keeps (`Needs.built_for`), as JSON.
BUILT_FOR = "memory-watchdog session state for: "


def rows_sql(events: str, needs: Needs) -> str:
    """Per session and bucket: the state's columns over the normalized `events` relation.

    A view's definition holds no bound parameter: names are literals here.
    """
    names = literal(needs.names)
    skips = [
        f"if(name IN {literal(ns)}, ({literal(field)}, JSONExtractString(payload,"
        f" {literal(field)})), ('', ''))"
        for field, ns in needs.skips
    ]
    skipped = f"arrayFilter(p -> p.1 != '', [{', '.join(skips)}])" if skips else "[]"
    scopes = [f"if(scope_{check} != 0, {literal(check)}, '')" for check, _ in needs.scopes]
    scoped = f"arrayFilter(x -> x != '', [{', '.join(scopes)}])" if scopes else "[]"
    flags = (
        f"toUInt8(if(payload_is_object, 0, {NOT_OBJECT})"
        f" + if(isValidUTF8(name) AND isValidUTF8(_session_raw) AND payload_is_utf8,"
        f" 0, {INVALID_UTF8}) + if(latency_invalid AND name IN {names}, {LATENCY_INVALID}, 0))"
    )
    return f"""
    SELECT
        _session_raw AS sid,
        intDiv(t, {BUCKET_MS}) * {BUCKET_MS} AS bucket,
        max(in_scope) AS scoped,
        min(t) AS first_seen,
        max(t) AS last_seen,
        count() AS n_events,
        groupUniqArrayArray(CAST({scoped} AS Array(String))) AS scopes,
        groupArray(t) AS times,
        groupUniqArrayStateIf((t, CAST(name AS String), CAST(event_id AS String),
            toUInt8(ifNull(result_count, 0) > 0),
            CAST({skipped} AS Array(Tuple(String, String)))), name IN {names}) AS events,
        groupUniqArrayStateIf((t, CAST(name AS String), CAST(event_id AS String), _flags),
            _flags != 0) AS flagged
    FROM (SELECT *, {flags} AS _flags FROM {events})
    GROUP BY sid, bucket"""


# --- schema apply --materialize --------------------------------------------------------


@dataclass(frozen=True)
class StatePlan:
    """Where the state table goes: `database`, the source table(s), the cluster."""

    database: str
    source_table: str
    source_local: str
    ttl: str | None
    cluster: str | None

    @property
    def table(self) -> str:
        return f"{self.database}.{STATE_TABLE}"

    @property
    def storage(self) -> str:
        return self.table + ("_local" if self.cluster else "")


def _view_select(
    settings: Settings,
    present: Mapping[str, str] | None,
    needs: Needs,
    table: str,
    where: str = "",
) -> str:
    events = f"({unbounded_sql(settings.source, present, dict(needs.scopes), table, where)})"
    key = literal(settings.source.display_name)
    columns = ", ".join(STATE_ROWS)
    return (
        f"SELECT {key} AS source, bucket, sid AS session_id, {columns}\n"
        f"FROM ({rows_sql(events, needs)}\n)"
    )


def state_statements(
    settings: Settings,
    plan: StatePlan,
    present: Mapping[str, str] | None,
    needs: Needs,
    *,
    since: datetime,
    until: datetime,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(purpose, SQL, parameters): the state table, its view, the backfill."""
    on = f" ON CLUSTER {plan.cluster}" if plan.cluster else ""
    ttl = f"\nTTL toDateTime(intDiv(bucket, 1000)) + {plan.ttl}" if plan.ttl else ""
    columns = ",\n".join(f"    {name} {typ}" for name, typ in COLUMNS.items())
    kept = needs.built_for(settings.source.session_filter or "")
    comment = f"\nCOMMENT {literal(BUILT_FOR + json.dumps(kept, sort_keys=True))}"
    layout = f"PARTITION BY intDiv(bucket, 86400000)\nORDER BY (source, bucket, session_id){ttl}{comment}"
    out: list[tuple[str, str, dict[str, Any]]] = []
    if plan.cluster:
        local = f"{STATE_TABLE}_local"
        zk_path = f"/clickhouse/tables/{{shard}}/{plan.database}/{local}"
        out.append(
            (
                "The per-session state on every shard, replicated.",
                f"CREATE TABLE IF NOT EXISTS {plan.storage}{on}\n(\n{columns}\n)\n"
                f"ENGINE = ReplicatedAggregatingMergeTree('{zk_path}', '{{replica}}')\n{layout}",
                {},
            )
        )
        out.append(
            (
                "What source.state reads: all shards, sessions sharded by id.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}{on} AS {plan.storage}\n"
                f"ENGINE = Distributed('{plan.cluster}', '{plan.database}', '{local}',"
                f" cityHash64(session_id)){comment}",
                {},
            )
        )
    else:
        out.append(
            (
                "The per-session state (source.state): per session and hour,"
                " what the session checks read.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}\n(\n{columns}\n)\n"
                f"ENGINE = AggregatingMergeTree\n{layout}",
                {},
            )
        )
    view = _view_select(settings, present, needs, plan.source_local)
    out.append(
        (
            "Every row inserted into the source from now on updates its session's state.",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {plan.database}.{STATE_VIEW}{on}"
            f" TO {plan.table}\nAS {view}",
            {},
        )
    )
    raw_ts = (
        settings.source.columns.get("ts") or compile_source(settings.source, present).columns["ts"]
    )
    ts = f"toDateTime64({raw_ts}, 3, 'UTC')"
    bounds = (
        f"{ts} >= fromUnixTimestamp64Milli({{backfill_from_ms:Int64}}, 'UTC')"
        f" AND {ts} < fromUnixTimestamp64Milli({{backfill_until_ms:Int64}}, 'UTC')"
    )
    backfill = _view_select(settings, present, needs, plan.source_table, bounds)
    out.append(
        (
            f"Backfill of the state: the source's rows from {rfc3339(since)} until the view"
            f" was created ({rfc3339(until)}).",
            f"INSERT INTO {plan.table} (source, bucket, session_id, {', '.join(STATE_ROWS)})"
            f"\n{backfill}",
            {"backfill_from_ms": to_ms(since), "backfill_until_ms": to_ms(until)},
        )
    )
    return out
