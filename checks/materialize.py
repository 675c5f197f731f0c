"""`schema apply --materialize`: the narrow table (one small normalized row per event, fed by a
view on the source and a backfill) and the session state's statements, on one node or `ON
CLUSTER`; how and when to use them is in docs/performance.md#a-narrow-table-for-large-deployments
and docs/sources.md#the-session-state-sourcestate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from checks.base import CheckSpec
from checks.kinds import kind_of, payload_names, session_scopes
from checks.scans.plans import Plans
from checks.scans.row import Needs
from checks.sharding import engine_arguments
from checks.sources import NARROW_TABLE, compile_source, unbounded_sql
from checks.state.layout import StatePlan, state_statements
from checks.triage import plain
from watchdog.core.errors import UsageError
from watchdog.core.settings import Settings
from watchdog.core.sql import is_identifier, is_table_name, literal, quoted, tuple_of
from watchdog.core.store import Store
from watchdog.core.times import rfc3339, to_ms

VIEW = "memory_events_mv"
LOCAL_SUFFIX = "_local"

# The narrow table's columns: the normalized event of docs/spec.md section 2 (the session id
# before the ignore list, the latency before the finite-and-not-negative rule: both applied
# at read), then what the raw source derives from the raw columns, stored as it was derived:
# the data-quality flags, whether the event is in the source's scope and in which checks'
# own, the triage dimensions.
COLUMNS: dict[str, str] = {
    "event_id": "String",
    "ts": "DateTime64(3, 'UTC')",
    "session_id": "String",
    "name": "LowCardinality(String)",
    "latency_ms": "Nullable(Float64)",
    "trigger": "LowCardinality(String)",
    "result_count": "Nullable(Int64)",
    "payload": "String CODEC(ZSTD(1))",
    "latency_invalid": "UInt8",
    "payload_is_object": "UInt8",
    "payload_is_utf8": "UInt8",
    "in_scope": "UInt8",
    "scopes": "Array(LowCardinality(String))",
    "dims": "Map(LowCardinality(String), String)",
}
# Not written: computed from event_id, for the evidence lookups by hash.
HASHED = "event_hash UInt64 MATERIALIZED cityHash64(event_id)"
INDEXES = (
    "INDEX event_ids event_id TYPE bloom_filter GRANULARITY 4",
    "INDEX event_hashes event_hash TYPE bloom_filter GRANULARITY 4",
)

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


def session_needs(
    settings: Settings, present: Mapping[str, str] | None, specs: Sequence[CheckSpec]
) -> Needs:
    """What the session state must keep for the enabled checks' session scans and their triage
    (the dimensions of a session's first event)."""
    source = compile_source(settings.source, present, session_scopes(specs))
    plans = Plans(source)
    for spec in specs:
        if spec.enabled:
            kind_of(spec).plan(plans, spec)
    return Needs.of(plans.sessions.values(), plain(source.dims))


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

    The expressions are the compiled source's (with any `[source.columns]`
    override), so the normalized preset, and the state path, reading the result
    see the values the raw preset computes.
    """
    if settings.source.preset == "normalized":
        raise UsageError(
            "schema apply --materialize reads the raw source table: run it with the config of"
            " the raw preset (joelclaw, otel_logs, otel_traces), then switch to"
            ' source.preset = "normalized"'
        )
    scopes = session_scopes(specs)
    compiled = compile_source(settings.source, present, scopes)
    keep = payload_names(specs)
    # Events whose payload no check reads keep only whether it was an object.
    payload = (
        f"if(name IN {tuple_of(keep)} OR NOT payload_is_object, payload, '{{}}')"
        if keep
        else "if(payload_is_object, '{}', payload)"
    )
    checks = [f"if(scope_{c} != 0, {quoted(c)}, '')" for c in scopes]
    scoped = f"arrayFilter(x -> x != '', [{', '.join(checks)}])" if checks else "[]"
    dims = ", ".join(f"{quoted(d)}, dim_{d}" for d in compiled.dims)
    events = unbounded_sql(settings.source, present, scopes, source_table, where)
    return (
        "SELECT event_id, ts, _session_raw AS session_id, name, _lat AS latency_ms, trigger,"
        f" result_count,\n       {payload} AS payload, latency_invalid, payload_is_object,"
        f" payload_is_utf8, in_scope,\n       CAST({scoped} AS Array(String)) AS scopes,"
        f" CAST(map({dims}) AS Map(String, String)) AS dims\nFROM ({events}\n)"
    )


def _columns_sql() -> str:
    columns = [f"{name} {typ}" for name, typ in COLUMNS.items()]
    return ",\n".join(f"    {item}" for item in (*columns, HASHED, *INDEXES))


def table_statements(settings: Settings, plan: NarrowPlan) -> list[Statement]:
    """CREATE DATABASE and the narrow table (replicated and distributed on a cluster)."""
    on = _on_cluster(settings)
    ttl = f"\nTTL toDateTime(ts) + {plan.ttl}" if plan.ttl else ""
    # By time: a run reads its window, its lookback's two cut hours and evidence ids from it.
    layout = f"PARTITION BY toDate(ts)\nORDER BY (ts, session_id){ttl}"
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


@dataclass(frozen=True)
class Replacing:
    """A ReplacingMergeTree source: the rows of one sorting key in one insert are one row of it
    (ClickHouse collapses them as it writes the part, `optimize_on_insert`), the newest version
    kept; the view copying its inserts into the narrow table collapses them the same way, so
    the narrow table and the session state hold the rows the source holds."""

    key: str  # the sorting key, SQL over the raw columns
    version: str  # its version column ('' when it has none)

    @classmethod
    def of(cls, engine: str, engine_full: str, sorting_key: str) -> Replacing | None:
        """From `system.tables`' engine, engine_full and sorting_key (None: not Replacing)."""
        if not engine.endswith("ReplacingMergeTree") or not sorting_key:
            return None
        args = engine_arguments(engine_full) if "(" in engine_full else []
        if engine.startswith("Replicated"):
            args = args[2:]  # the Keeper path and the replica name
        version = args[0] if args and is_identifier(args[0]) else ""
        return cls(sorting_key, version)

    def rows(self, table: str) -> str:
        """The rows of one insert into `table`, each sorting key once (the newest version)."""
        order = f" ORDER BY {self.version} DESC" if self.version else ""
        return f"(SELECT * FROM {table}{order} LIMIT 1 BY {self.key})"


def replacing_of(store: Store, table: str) -> Replacing | None:
    """`table`'s engine, when it is a ReplacingMergeTree (None otherwise, or no table)."""
    facts = store.table_facts(table, "engine, engine_full, sorting_key")
    return Replacing.of(*facts) if facts else None


def view_statement(
    settings: Settings,
    plan: NarrowPlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    replacing: Replacing | None = None,
) -> Statement:
    """The materialized view copying each new source row into the narrow table."""
    local = replacing.rows(plan.source_local) if replacing else plan.source_local
    select = narrow_select(settings, present, specs, local)
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
    until: datetime | None = None,
) -> Statement:
    """The copy, as one statement, of the source's rows from `since` (to `until`, else all of
    them, rows stamped ahead included) that the narrow table lacks: after the views exist,
    what they took in is not copied again. `schema apply --yes` runs it chunk by chunk."""
    chunk = Chunk(to_ms(since), to_ms(until) if until is not None else None)
    end = f"until {rfc3339(until)}" if until is not None else "on, stamped ahead included"
    return Statement(
        f"Backfill: the source's rows from {rfc3339(since)} {end}, less those the narrow table"
        " holds already (what the views took in); --yes copies it an hour at a time.",
        BackfillSql.of(settings, plan, present, specs).copy_missing_sql(chunk),
        chunk.params(),
    )


def materialize_statements(
    settings: Settings,
    plan: NarrowPlan,
    present: Mapping[str, str] | None,
    specs: Sequence[CheckSpec],
    *,
    since: datetime,
    until: datetime | None = None,
    replacing: Replacing | None = None,
) -> list[Statement]:
    """The narrow table and the state with their views, then the backfill of what came before.

    The views come first, so nothing inserted meanwhile is missed; the state's view reads the
    narrow table, so the narrow table's backfill, run last, fills the state too.
    """
    state = StatePlan(plan.database, plan.storage, plan.ttl, plan.cluster)
    needs = session_needs(settings, present, specs)
    return [
        *table_statements(settings, plan),
        *(
            Statement(purpose, sql, params)
            for purpose, sql, params in state_statements(settings, state, needs)
        ),
        view_statement(settings, plan, present, specs, replacing),
        backfill_statement(settings, plan, present, specs, since, until),
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


# -- the backfill ------------------------------------------------------------------------

STAGING = "memory_events_backfill"  # the chunk being copied: the source's rows, counted
PROGRESS = "materialize_backfill"  # the chunks done, per narrow table
NAMES = tuple(COLUMNS)
# The whole narrow row, hashed: the identity the multiset difference counts copies of.
KEY = f"sipHash128(tuple({', '.join(NAMES)}))"


def column_type(name: str) -> str:
    """The narrow table's type of a column, without its codec."""
    return COLUMNS[name].split(" CODEC(")[0]


@dataclass(frozen=True)
class Chunk:
    """[start, end) of the source's time, end None for the last (rows stamped ahead included)."""

    start_ms: int
    end_ms: int | None

    def label(self) -> str:
        start = rfc3339(datetime.fromtimestamp(self.start_ms / 1000, UTC))
        end = rfc3339(datetime.fromtimestamp(self.end_ms / 1000, UTC)) if self.end_ms else "∞"
        return f"[{start}, {end})"

    def params(self) -> dict[str, int]:
        found = {"backfill_from_ms": self.start_ms}
        if self.end_ms is not None:
            found["backfill_until_ms"] = self.end_ms
        return found


def _bounds(ts: str, chunk: Chunk) -> str:
    """`ts` within the chunk, as SQL over its bound parameters."""
    lower = f"{ts} >= fromUnixTimestamp64Milli({{backfill_from_ms:Int64}}, 'UTC')"
    if chunk.end_ms is None:
        return lower
    return f"{lower} AND {ts} < fromUnixTimestamp64Milli({{backfill_until_ms:Int64}}, 'UTC')"


@dataclass(frozen=True)
class BackfillSql:
    """The statements of one narrow table's backfill from its source (checks/backfill.py runs
    them chunk by chunk; `backfill_statement` is the whole of it as one statement)."""

    plan: NarrowPlan
    source_rows: Callable[[str], str]  # raw `where` -> the narrow rows of the source, typed
    source_ts: str  # the source's event time, as SQL over its raw columns
    cluster: str | None

    @classmethod
    def of(
        cls,
        settings: Settings,
        plan: NarrowPlan,
        present: Mapping[str, str] | None,
        specs: Sequence[CheckSpec],
    ) -> BackfillSql:
        ts = f"toDateTime64({compile_source(settings.source, present).columns['ts']}, 3, 'UTC')"

        def rows(where: str) -> str:
            typed = ", ".join(f"CAST({n} AS {column_type(n)}) AS {n}" for n in NAMES)
            inner = narrow_select(settings, present, specs, plan.source_table, where)
            return f"SELECT {typed}\nFROM ({inner}\n)"

        return cls(plan, rows, ts, settings.store.cluster)

    @property
    def staging(self) -> str:
        return f"{self.plan.database}.{STAGING}"

    @property
    def progress(self) -> str:
        return f"{self.plan.database}.{PROGRESS}"

    # -- the statements -------------------------------------------------------------------

    def copy_missing_sql(self, chunk: Chunk) -> str:
        """One statement: the chunk's source rows the narrow table lacks (as a script runs it:
        the source read first, the right side of the join, then the narrow table)."""
        counted = self._counted(self.source_rows(_bounds(self.source_ts, chunk)))
        return (
            f"INSERT INTO {self.plan.table} ({', '.join(NAMES)})\n"
            f"SELECT {', '.join(f's.{n}' for n in NAMES)}\n"
            f"FROM ({self._held(chunk)}) AS held\nRIGHT JOIN ({counted}) AS s ON held.k = s.k\n"
            "ARRAY JOIN range(toUInt64(greatest(toInt64(s.copies) - toInt64(held.n), 0))) AS _copy"
        )

    def _counted(self, rows: str) -> str:
        """Each distinct row of `rows` once, with its copies and its key `k`."""
        picked = ", ".join(f"any({n}) AS {n}" for n in NAMES)
        keyed = f"SELECT *, {KEY} AS k FROM ({rows}\n)"
        return f"SELECT k, {picked}, count() AS copies\nFROM ({keyed})\nGROUP BY k"

    def _held(self, chunk: Chunk) -> str:
        """The copies of each row the narrow table holds in the chunk's time."""
        return (
            f"SELECT {KEY} AS k, count() AS n FROM {self.plan.table}"
            f" WHERE {_bounds('ts', chunk)} GROUP BY k"
        )

    def setup_sql(self) -> list[str]:
        """The staging table and the record of the chunks done (on the node the command talks
        to), which one backfill of a narrow table at a time uses: `schema apply` holds the
        backfill's lock in the store while it runs (watchdog.cli.schema)."""
        columns = ", ".join(f"{n} {column_type(n)}" for n in NAMES)
        return [
            f"CREATE TABLE IF NOT EXISTS {self.staging} (k FixedString(16), {columns}, copies UInt64)"
            " ENGINE = MergeTree ORDER BY k",
            f"CREATE TABLE IF NOT EXISTS {self.progress} (target String, chunk_from Int64,"
            " chunk_until Int64, copied UInt64, done_at DateTime64(3, 'UTC'))"
            " ENGINE = MergeTree ORDER BY (target, chunk_from)",
        ]

    def stage_sql(self, chunk: Chunk) -> str:
        counted = self._counted(self.source_rows(_bounds(self.source_ts, chunk)))
        return f"INSERT INTO {self.staging} (k, {', '.join(NAMES)}, copies)\n{counted}"

    def copy_staged_sql(self, chunk: Chunk) -> str:
        return (
            f"INSERT INTO {self.plan.table} ({', '.join(NAMES)})\n"
            f"SELECT {', '.join(f's.{n}' for n in NAMES)}\n"
            f"FROM {self.staging} AS s LEFT JOIN ({self._held(chunk)}) AS held ON held.k = s.k\n"
            "ARRAY JOIN range(toUInt64(greatest(toInt64(s.copies) - toInt64(held.n), 0))) AS _copy"
        )

    def missing_sql(self, chunk: Chunk) -> str:
        """How many copies the narrow table lacks of the staged rows (what the copy adds)."""
        return (
            "SELECT sum(toUInt64(greatest(toInt64(s.copies) - toInt64(held.n), 0)))"
            f" FROM {self.staging} AS s LEFT JOIN ({self._held(chunk)}) AS held ON held.k = s.k"
        )
