"""The session state's table (per source, hour and session: times, counts, scopes, the first
event's dimensions, the role and flagged events as compact tuples appended at insert), the view
on the narrow table that fills it, what it keeps for a config (`Needs`, recorded in its COMMENT)
and its statements; docs/sources.md#the-session-state-sourcestate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from checks.scans.session import FirstDim, Scope, SessionScan
from watchdog.core.settings import Settings
from watchdog.core.sql import literal

STATE_TABLE = "session_state"
STATE_VIEW = "session_state_mv"
BUCKET_MS = 60 * 60 * 1000  # a state row per session and hour

# What the data-quality counts flag, one bit each (`flagged`).
NOT_OBJECT, INVALID_UTF8, LATENCY_INVALID = 1, 2, 4

# (t, id hash, name code, flags): the code is the name's place in the kept names (from 1),
# flag bit 0 "has results", bit 1 + k "matches payload filter k". Appended at insert
# (`groupArrayArray`): a row written twice is one element once read (`arrayDistinct`).
ROLE = "Tuple(Int64, UInt64, UInt16, UInt8)"
COLUMNS: dict[str, str] = {
    "source": "LowCardinality(String)",
    "bucket": "Int64",  # epoch ms at the start of the bucket
    "session_id": "String",  # before the ignore list
    "first_seen": "SimpleAggregateFunction(min, Int64)",
    "last_seen": "SimpleAggregateFunction(max, Int64)",
    "n_events": "SimpleAggregateFunction(sum, UInt64)",
    "scoped": "SimpleAggregateFunction(max, UInt8)",
    "scopes": "SimpleAggregateFunction(groupUniqArrayArray, Array(String))",
    "roles": f"SimpleAggregateFunction(groupArrayArray, Array({ROLE}))",
    # (t, id hash, name code or 0, data-quality flags) of each event a count flags
    "flagged": f"SimpleAggregateFunction(groupArrayArray, Array({ROLE}))",
    # the first event: its time, then its triage dimensions (in the order kept)
    "first": "SimpleAggregateFunction(min, Tuple(Int64, Array(String)))",
    # per name code: its first and last time and its count, over the hour
    "firsts": "SimpleAggregateFunction(minMap, Tuple(Array(UInt16), Array(Int64)))",
    "lasts": "SimpleAggregateFunction(maxMap, Tuple(Array(UInt16), Array(Int64)))",
    "counts": "SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64)))",
}
STATE_ROWS = tuple(c for c in COLUMNS if c not in ("source", "bucket", "session_id"))
# The state's layout, recorded in its COMMENT: a state of another layout is rebuilt.
LAYOUT = hashlib.sha256(json.dumps(COLUMNS).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Filter:
    """A payload filter some name set has: events of `names` whose `field` is one of `values`."""

    field: str
    names: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True)
class Needs:
    """What the state keeps of each event, for a set of session scans."""

    names: tuple[str, ...]  # the event names some session rule reads (codes 1, 2, ...)
    filters: tuple[Filter, ...]  # the payload filters, in flag order
    scopes: tuple[tuple[str, str], ...]  # (check id, its session filter)
    dims: tuple[str, ...]  # the triage dimensions of a session's first event

    @classmethod
    def of(cls, scans: Iterable[SessionScan], dims: Iterable[str] = ()) -> Needs:
        names: set[str] = set()
        filters: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        scopes: dict[str, str] = {}
        wanted = set(dims)
        for scan in scans:
            for name_set in scan.sets.bits:
                names.update(name_set.names)
                if name_set.skip is not None:
                    key = (name_set.skip.field, tuple(sorted(set(name_set.skip.values))))
                    filters.setdefault(key, set()).update(name_set.names)
            for item in scan.inputs.values():
                if isinstance(item, Scope):
                    scopes[item.check_id] = item.predicate
                elif isinstance(item, FirstDim):
                    wanted.add(item.dim)
        return cls(
            tuple(sorted(names)),
            tuple(Filter(f, tuple(sorted(n)), v) for (f, v), n in sorted(filters.items())),
            tuple(sorted(scopes.items())),
            tuple(sorted(wanted)),
        )

    def built_for(self, session_filter: str) -> dict[str, Any]:
        """What a state keeps, as recorded on its table and compared on every read."""
        return {
            "layout": LAYOUT,
            "names": list(self.names),
            "filters": [[f.field, list(f.names), list(f.values)] for f in self.filters],
            "scopes": dict(self.scopes),
            "dims": list(self.dims),
            "session_filter": session_filter,
        }

    @classmethod
    def recorded(cls, built: Mapping[str, Any]) -> Needs:
        """The needs a state's COMMENT records (`built_for`)."""
        return cls(
            tuple(built.get("names", ())),
            tuple(Filter(f, tuple(n), tuple(v)) for f, n, v in built.get("filters", ())),
            tuple(sorted(dict(built.get("scopes", {})).items())),
            tuple(built.get("dims", ())),
        )


# The state table's COMMENT: this mark, then what its view keeps (`Needs.built_for`), as JSON.
BUILT_FOR = "memory-watchdog session state for: "


def rows_sql(events: str, needs: Needs) -> str:
    """Per session and bucket: the state's columns over narrow-table rows (`events`).

    What the view computes at insert, and what a run computes for the two hours
    its lookback cuts. A view's definition holds no bound parameter: names are
    literals here.
    """
    names = literal(needs.names)
    code = f"toUInt16(indexOf({names}, name))"
    bits = [
        f"bitShiftLeft(toUInt8(name IN {literal(f.names)} AND JSONExtractString(payload,"
        f" {literal(f.field)}) IN {literal(f.values)}), {k + 1})"
        for k, f in enumerate(needs.filters)
    ]
    flags = " + ".join(["toUInt8(ifNull(result_count, 0) > 0)", *bits])
    quality = (
        f"toUInt8(if(payload_is_object, 0, {NOT_OBJECT})"
        f" + if(isValidUTF8(name) AND isValidUTF8(session_id) AND payload_is_utf8,"
        f" 0, {INVALID_UTF8}) + if(latency_invalid AND _code != 0, {LATENCY_INVALID}, 0))"
    )
    dims = f"[{', '.join(f'dims[{literal(d)}]' for d in needs.dims)}]"
    return f"""
    SELECT
        session_id AS sid,
        intDiv(t, {BUCKET_MS}) * {BUCKET_MS} AS bucket,
        min(t) AS first_seen,
        max(t) AS last_seen,
        -- each event once, as the source counts it once it merged (ReplacingMergeTree does at
        -- insert): a row written again in the same insert is not another event
        uniqExact(cityHash64(event_id), t) AS n_events,
        max(in_scope) AS scoped,
        groupUniqArrayArray(CAST(scopes AS Array(String))) AS scopes,
        groupArrayIf((t, cityHash64(event_id), _code, if(_code != 0, {flags}, 0)), _code != 0)
            AS roles,
        groupArrayIf((t, cityHash64(event_id), _code, _quality), _quality != 0) AS flagged,
        min((t, CAST({dims} AS Array(String)))) AS first,
        minMapIf([_code], [t], _code != 0) AS firsts,
        maxMapIf([_code], [t], _code != 0) AS lasts,
        sumMapIf([_code], [toUInt64(1)], _code != 0) AS counts
    FROM (
        SELECT *, toUnixTimestamp64Milli(ts) AS t, {code} AS _code, {quality} AS _quality
        FROM {events}
    )
    GROUP BY sid, bucket"""


# --- schema apply --materialize --------------------------------------------------------


@dataclass(frozen=True)
class StatePlan:
    """Where the state table goes: `database`, the narrow table it is fed from, the cluster."""

    database: str
    narrow: str  # the narrow table the view reads (on a cluster: its shard-local table)
    ttl: str | None
    cluster: str | None

    @property
    def table(self) -> str:
        return f"{self.database}.{STATE_TABLE}"

    @property
    def storage(self) -> str:
        return self.table + ("_local" if self.cluster else "")


def state_statements(
    settings: Settings, plan: StatePlan, needs: Needs
) -> list[tuple[str, str, dict[str, Any]]]:
    """(purpose, SQL, parameters): the state table and the view feeding it from the narrow
    table (whose backfill then fills the state too)."""
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
    # On a cluster each shard's narrow rows feed its own state: both are sharded by session.
    key = literal(settings.source.display_name)
    select = (
        f"SELECT {key} AS source, bucket, sid AS session_id, {', '.join(STATE_ROWS)}\n"
        f"FROM ({rows_sql(plan.narrow, needs)}\n)"
    )
    out.append(
        (
            "Every row written to the narrow table (its backfill's included) updates its"
            " session's state.",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {plan.database}.{STATE_VIEW}{on}"
            f" TO {plan.storage}\nAS {select}",
            {},
        )
    )
    return out
