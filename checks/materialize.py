"""`schema apply --materialize`: the narrow table (one small normalized row per event, fed by a
view on the source and a backfill) and the session state's statements, on one node or `ON
CLUSTER`; how and when to use them is in docs/performance.md#a-narrow-table-for-large-deployments
and docs/sources.md#the-session-state-sourcestate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checks.base import CheckSpec
from checks.kinds import KINDS
from checks.scans.plans import Plans
from checks.sources import compile_source
from checks.state.layout import Needs, StatePlan, state_statements
from watchdog.core.errors import UsageError
from watchdog.core.settings import Settings
from watchdog.core.sql import is_identifier, is_table_name, literal, tuple_of
from watchdog.core.times import rfc3339, to_ms

NARROW_TABLE = "memory_events"
# Copied as the source preset converts them; the payload is narrowed on the way.
NARROW_COLUMNS = ("event_id", "ts", "session_id", "name", "latency_ms", "trigger", "result_count")
VIEW = "memory_events_mv"
LOCAL_SUFFIX = "_local"

# The narrow table's columns: the normalized event of docs/spec.md section 2.
COLUMNS: dict[str, str] = {
    "event_id": "String",
    "ts": "DateTime64(3, 'UTC')",
    "session_id": "String",
    "name": "LowCardinality(String)",
    "latency_ms": "Nullable(Float64)",
    "trigger": "LowCardinality(String)",
    "result_count": "Nullable(Int64)",
    "payload": "String CODEC(ZSTD(1))",
}

_TTL_INTERVAL = re.compile(
    r"\bTTL\b.*?toInterval(Second|Minute|Hour|Day|Week|Month|Quarter|Year)\((\d+)\)"
)


@dataclass(frozen=True)
class Statement:
    """One SQL statement, what it is for, and its bound parameters."""

    purpose: str
    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The statement as a clickhouse-client script: a comment, `SET param_*`, the SQL."""
        lines = [f"-- {self.purpose}"]
        lines += [f"SET param_{key} = {literal(value)};" for key, value in self.params.items()]
        return "\n".join([*lines, f"{self.sql.strip()};"])


def _identifier(value: str, what: str) -> str:
    if not is_identifier(value):
        raise UsageError(f"{what}: {value!r} is not an identifier (letters, digits, _)")
    return value


def _table_name(value: str, what: str) -> str:
    if not is_table_name(value):
        raise UsageError(f"{what}: {value!r} is not a table name (database.table)")
    return value


def session_needs(settings: Settings, specs: Sequence[CheckSpec]) -> Needs:
    """What the session state must keep for the enabled checks' session scans."""
    plans = Plans(compile_source(settings.source, scopes=KINDS.scopes(specs)))
    for spec in specs:
        if spec.enabled:
            KINDS.of(spec).plan(plans, spec)
    return Needs.of(plans.sessions.values())


def source_ttl(engine_full: str) -> str | None:
    """The source's TTL interval (e.g. `INTERVAL 180 DAY`) from `system.tables.engine_full`."""
    match = _TTL_INTERVAL.search(engine_full)
    if match is None:
        return None
    return f"INTERVAL {match.group(2)} {match.group(1).upper()}"


def _on_cluster(settings: Settings) -> str:
    cluster = settings.store.cluster
    return f" ON CLUSTER {cluster}" if cluster else ""  # an identifier: checked at load


@dataclass(frozen=True)
class NarrowPlan:
    """Where the narrow table goes and what feeds it."""

    database: str
    source_table: str  # read by the backfill (on a cluster: the Distributed source table)
    source_local: str  # the table the view is attached to (on a cluster: the shard-local one)
    ttl: str | None
    cluster: str | None

    @property
    def table(self) -> str:
        """What the normalized preset reads (on a cluster: the Distributed table)."""
        return f"{self.database}.{NARROW_TABLE}"

    @property
    def storage(self) -> str:
        """Where rows are stored (on a cluster: each shard's replicated table)."""
        return self.table + (LOCAL_SUFFIX if self.cluster else "")


def narrow_select(
    settings: Settings,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    source_table: str,
    where: str = "",
) -> str:
    """The SELECT mapping rows of `source_table` to narrow-table rows.

    The expressions are the source preset's (with any `[source.columns]`
    override), converted exactly as the compiled source converts them, so the
    normalized preset reading the result sees the same values.
    """
    if settings.source.preset == "normalized":
        raise UsageError(
            "schema apply --materialize reads the raw source table: run it with the config of"
            " the raw preset (joelclaw, otel_logs, otel_traces), then switch to"
            ' source.preset = "normalized"'
        )
    compiled = compile_source(settings.source, present)
    typed = compiled.typed
    keep = KINDS.payload_names(specs)
    is_object = "isValidJSON(_payload) AND JSONType(_payload) = 'Object'"
    # Events whose payload no check reads keep only whether it was an object.
    payload = (
        f"if(name IN {tuple_of(keep)} OR NOT ({is_object}), _payload, '{{}}')"
        if keep
        else f"if({is_object}, '{{}}', _payload)"
    )
    tail = f"\n    WHERE {where}" if where else ""
    return (
        f"SELECT event_id, ts, session_id, name, latency_ms, trigger, result_count,\n"
        f"       {payload} AS payload\n"
        "FROM (\n"
        "    SELECT\n"
        + "".join(f"        {typed[name]} AS {name},\n" for name in NARROW_COLUMNS)
        + f"        {typed['payload']} AS _payload\n"
        f"    FROM {source_table} {compiled.array_join}".rstrip()
        + f"{tail}\n)"
    )


def _columns_sql() -> str:
    return ",\n".join(f"    {name} {typ}" for name, typ in COLUMNS.items())


def table_statements(settings: Settings, plan: NarrowPlan) -> list[Statement]:
    """CREATE DATABASE and the narrow table (replicated and distributed on a cluster)."""
    on = _on_cluster(settings)
    ttl = f"\nTTL toDateTime(ts) + {plan.ttl}" if plan.ttl else ""
    layout = f"PARTITION BY toDate(ts)\nORDER BY (session_id, ts){ttl}"
    statements = [
        Statement("The watchdog's database.", f"CREATE DATABASE IF NOT EXISTS {plan.database}{on}")
    ]
    if plan.cluster:
        local = f"{NARROW_TABLE}{LOCAL_SUFFIX}"
        zk_path = f"/clickhouse/tables/{{shard}}/{plan.database}/{local}"
        statements.append(
            Statement(
                "The narrow normalized-event table on every shard, replicated.",
                f"CREATE TABLE IF NOT EXISTS {plan.storage}{on}\n(\n{_columns_sql()}\n)\n"
                f"ENGINE = ReplicatedMergeTree('{zk_path}', '{{replica}}')\n{layout}",
            )
        )
        statements.append(
            Statement(
                "What the normalized preset reads: all shards, rows sharded by session id.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}{on} AS {plan.storage}\n"
                f"ENGINE = Distributed('{plan.cluster}', '{plan.database}', '{local}',"
                " cityHash64(session_id))",
            )
        )
    else:
        statements.append(
            Statement(
                "The narrow normalized-event table: one small row per event.",
                f"CREATE TABLE IF NOT EXISTS {plan.table}\n(\n{_columns_sql()}\n)\n"
                f"ENGINE = MergeTree\n{layout}",
            )
        )
    return statements


def view_statement(
    settings: Settings,
    plan: NarrowPlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
) -> Statement:
    """The materialized view copying each new source row into the narrow table."""
    select = narrow_select(settings, present, specs, plan.source_local)
    # On a cluster the view writes through the Distributed table, which routes by session.
    return Statement(
        "Every row inserted into the source from now on is copied, narrowed.",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {plan.database}.{VIEW}{_on_cluster(settings)}"
        f" TO {plan.table}\nAS {select}",
    )


def backfill_statement(
    settings: Settings,
    plan: NarrowPlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    since: datetime,
    until: datetime,
) -> Statement:
    """The one-off copy of the rows the source already holds in [since, until)."""
    compiled = compile_source(settings.source, present)
    ts = f"toDateTime64({compiled.columns['ts']}, 3, 'UTC')"
    bounds = (
        f"{ts} >= fromUnixTimestamp64Milli({{backfill_from_ms:Int64}}, 'UTC')"
        f" AND {ts} < fromUnixTimestamp64Milli({{backfill_until_ms:Int64}}, 'UTC')"
    )
    select = narrow_select(settings, present, specs, plan.source_table, bounds)
    return Statement(
        f"Backfill: the source's rows from {rfc3339(since)} until the view was created"
        f" ({rfc3339(until)}).",
        f"INSERT INTO {plan.table} ({', '.join(COLUMNS)})\n{select}",
        {"backfill_from_ms": to_ms(since), "backfill_until_ms": to_ms(until)},
    )


def materialize_statements(
    settings: Settings,
    plan: NarrowPlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    *,
    since: datetime,
    until: datetime,
) -> list[Statement]:
    """Table, view, then the backfill of what came before the view; the same for the state."""
    state = StatePlan(plan.database, plan.source_table, plan.source_local, plan.ttl, plan.cluster)
    return [
        *table_statements(settings, plan),
        view_statement(settings, plan, present, specs),
        backfill_statement(settings, plan, present, specs, since, until),
        *(
            Statement(purpose, sql, params)
            for purpose, sql, params in state_statements(
                settings, state, present, session_needs(settings, specs), since=since, until=until
            )
        ),
    ]


def plan_for(
    settings: Settings,
    *,
    ttl: str | None,
    source_local: str | None = None,
    database: str | None = None,
) -> NarrowPlan:
    """The narrow table's plan for these settings."""
    source_table = settings.source.table_name
    return NarrowPlan(
        database=_identifier(database or settings.store.database, "store.database"),
        source_table=_table_name(source_table, "source.table"),
        source_local=_table_name(source_local or source_table, "--source-local"),
        ttl=ttl,
        cluster=settings.store.cluster,
    )
