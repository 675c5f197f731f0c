"""The session state's table (per source, hour and session: the one session row's stored columns,
`checks.scans.row`), the view on the narrow table that fills it with the row's own aggregates,
what it keeps for a config (`Needs`, recorded in its COMMENT) and its statements;
docs/sources.md#the-session-state-sourcestate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checks.scans.binder import Literals
from checks.scans.row import COLUMNS as ROW
from checks.scans.row import Filter, Needs, Terms, aggregates
from checks.sources import CompiledSource, narrow_dims, narrow_items
from watchdog.core.settings import Settings
from watchdog.core.sql import literal

STATE_TABLE = "session_state"
STATE_VIEW = "session_state_mv"
BUCKET_MS = 60 * 60 * 1000  # a state row per session and hour

# The key of a row (the source, the hour, the session id before the ignore list), then the
# session row's columns as stored: each merged by its own function as parts merge.
KEY: dict[str, str] = {
    "source": "LowCardinality(String)",
    "bucket": "Int64",  # epoch ms at the start of the bucket
    "session_id": "String",  # before the ignore list
}
COLUMNS: dict[str, str] = {**KEY, **{c.name: c.stored for c in ROW}}
# The state's layout, recorded in its COMMENT: a state of another layout is rebuilt.
LAYOUT = hashlib.sha256(json.dumps(COLUMNS).encode()).hexdigest()[:12]


def built_for(needs: Needs, session_filter: str, source: str) -> dict[str, Any]:
    """What a state keeps, as recorded on its table and compared on every read: `source` is
    the name its rows are kept under (`source.name`, else the table it was built from)."""
    return {
        "layout": LAYOUT,
        "source": source,
        "names": list(needs.names),
        "filters": [[f.field, list(f.names), list(f.values)] for f in needs.filters],
        "scopes": dict(needs.scopes),
        "dims": list(needs.dims),
        "session_filter": session_filter,
    }


def recorded(built: Mapping[str, Any]) -> Needs:
    """The needs a state's COMMENT records (`built_for`)."""
    return Needs(
        tuple(built.get("names", ())),
        tuple(Filter(f, tuple(n), tuple(v)) for f, n, v in built.get("filters", ())),
        tuple(sorted(dict(built.get("scopes", {})).items())),
        tuple(built.get("dims", ())),
    )


# The state table's COMMENT: this mark, then what its view keeps (`built_for`), as JSON.
BUILT_FOR = "memory-watchdog session state for: "


def narrow_rows(table: str, needs: Needs) -> CompiledSource:
    """Every row of the narrow table `table` as the normalized event, for a view's definition:
    no read range, no ignore list and no bound parameter (a view holds none)."""
    return CompiledSource(
        name=table,
        preset="normalized",
        table=table,
        items=tuple(
            narrow_items(needs.dims, [c for c, _ in needs.scopes], "CAST([] AS Array(String))")
        ),
        where="",
        params={},
        columns={},
        dims=narrow_dims(needs.dims),
    )


def state_rows(narrow: str, needs: Needs, source_name: str) -> str:
    """The view's SELECT: per session and hour, the session row of the narrow rows inserted."""
    terms = Terms(needs, Literals())
    return narrow_rows(narrow, needs).select(
        f"{literal(source_name)} AS source, intDiv(t, {BUCKET_MS}) * {BUCKET_MS} AS bucket,"
        f" session_id,\n    {aggregates(terms)}",
        group="session_id, bucket",
        dims=bool(needs.dims),
        terms=terms.items(),
    )


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
    kept = built_for(needs, settings.source.session_filter or "", settings.source.display_name)
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
    select = state_rows(plan.narrow, needs, settings.source.display_name)
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
