"""`memory-watchdog schema apply`: the watchdog's own tables, and the optional narrow table.

Without `--materialize` it applies the watchdog's state tables (alert states,
outbox, run log, silences) in `store.database`. With `--materialize` it also
builds, for large deployments, a narrow table `<store.database>.memory_events`
holding just the normalized event (SPEC section 2), fed by a materialized
view on the source table and filled once by a backfill `INSERT ... SELECT`.
A config with `source.preset = "normalized"` then reads that table directly:
one small row per event instead of a wide, JSON-laden one.

It prints the statements; `--yes` executes them, in order. With
`store.cluster` set, every statement runs `ON CLUSTER`, the table is a
`ReplicatedMergeTree` on each shard behind a `Distributed` table sharded by
session id, and the view (attached to the local source table that receives
inserts, `--source-local`) writes through the `Distributed` table, so each
session's events live on one shard.

The view keeps the event's columns as the source preset computes them, with
the session id before the ignore list (the normalized preset applies it at
read time, so changing `ignore_sessions` needs no rebuild). The payload is
kept for the events whose checks read it (write-gate decisions, deviations,
custom checks on `payload.<key>`); any other event stores `{}` in its place,
or its payload as written when that is not a JSON object, so the data-quality
count of non-object payloads is unchanged. Re-apply after changing those
event names. A view's definition is stored by the server, so the event names
in it are escaped SQL literals; the backfill binds its time range as
parameters.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from checks.base import rfc3339, to_ms
from checks.kinds import CheckSpec, DeviationContract, DeviationEvidence, Quantile, Share
from checks.sources import PRESETS, compile_source
from watchdog.core.errors import UsageError
from watchdog.core.settings import Settings, parse_duration
from watchdog.core.store import Store

NARROW_TABLE = "memory_events"
VIEW = "memory_events_mv"
LOCAL_SUFFIX = "_local"

# The narrow table's columns: the normalized event of SPEC section 2.
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

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
        lines += [f"SET param_{key} = {_literal(value)};" for key, value in self.params.items()]
        return "\n".join([*lines, f"{self.sql.strip()};"])


def _literal(value: Any) -> str:
    """A value as a ClickHouse literal (numbers bare, text quoted and escaped)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _string_list(values: Sequence[str]) -> str:
    return "(" + ", ".join(_literal(v) for v in values) + ")"


def _identifier(value: str, what: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise UsageError(f"{what}: {value!r} is not an identifier (letters, digits, _)")
    return value


def _table_name(value: str, what: str) -> str:
    parts = value.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        raise UsageError(f"{what}: {value!r} is not a table name (database.table)")
    return value


def payload_names(specs: Sequence[CheckSpec]) -> list[str]:
    """The event names whose payload some enabled check reads."""
    names: list[str] = []
    for spec in specs:
        if not spec.enabled:
            continue
        p = spec.params
        if isinstance(p, Share | DeviationContract):
            names += p.events
        elif isinstance(p, DeviationEvidence):
            names += p.contract.events
        elif isinstance(p, Quantile) and p.field.startswith("payload."):
            names += p.events
    return sorted(set(names))


def source_ttl(engine_full: str) -> str | None:
    """The source's TTL interval (e.g. `INTERVAL 180 DAY`) from `system.tables.engine_full`."""
    match = _TTL_INTERVAL.search(engine_full)
    if match is None:
        return None
    return f"INTERVAL {match.group(2)} {match.group(1).upper()}"


def _on_cluster(settings: Settings) -> str:
    cluster = settings.store.cluster
    return f" ON CLUSTER {_identifier(cluster, 'store.cluster')}" if cluster else ""


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
    present: set[str] | None,
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
    preset = PRESETS[settings.source.preset]
    c = compiled.columns
    keep = payload_names(specs)
    is_object = "isValidJSON(_payload) AND JSONType(_payload) = 'Object'"
    # Events whose payload no check reads keep only whether it was an object.
    payload = (
        f"if(name IN {_string_list(keep)} OR NOT ({is_object}), _payload, '{{}}')"
        if keep
        else f"if({is_object}, '{{}}', _payload)"
    )
    tail = f"\n    WHERE {where}" if where else ""
    return (
        f"SELECT event_id, ts, session_id, name, latency_ms, trigger, result_count,\n"
        f"       {payload} AS payload\n"
        f"FROM (\n"
        f"    SELECT\n"
        f"        toString({c['event_id']}) AS event_id,\n"
        f"        toDateTime64({c['ts']}, 3, 'UTC') AS ts,\n"
        f"        toString({c['session_id']}) AS session_id,\n"
        f"        toString({c['name']}) AS name,\n"
        f"        toFloat64OrNull(toString({c['latency_ms']})) AS latency_ms,\n"
        f"        toString({c['trigger']}) AS trigger,\n"
        f"        toInt64OrNull(toString({c['result_count']})) AS result_count,\n"
        f"        toString({c['payload']}) AS _payload\n"
        f"    FROM {source_table} {preset.array_join}".rstrip()
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
    settings: Settings, plan: NarrowPlan, present: set[str] | None, specs: Sequence[CheckSpec]
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
    present: set[str] | None,
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


def state_statements(settings: Settings) -> list[Statement]:
    """The watchdog's own tables (alert states, outbox, run log, silences)."""
    from alerts.state import TABLES, create_table_sql

    statements = [
        Statement(
            "The watchdog's database.",
            f"CREATE DATABASE IF NOT EXISTS `{settings.store.database}`",
        )
    ]
    for name in TABLES:
        statements.append(Statement(f"State table {name}.", create_table_sql(settings, name)))
    return statements


def materialize_statements(
    settings: Settings,
    plan: NarrowPlan,
    present: set[str] | None,
    specs: Sequence[CheckSpec],
    *,
    since: datetime,
    until: datetime,
) -> list[Statement]:
    """Table, view, then the backfill of what came before the view."""
    return [
        *table_statements(settings, plan),
        view_statement(settings, plan, present, specs),
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
    source_table = settings.source.table or PRESETS[settings.source.preset].default_table
    return NarrowPlan(
        database=_identifier(database or settings.store.database, "store.database"),
        source_table=_table_name(source_table, "source.table"),
        source_local=_table_name(source_local or source_table, "--source-local"),
        ttl=ttl,
        cluster=settings.store.cluster,
    )


# --- the command ---------------------------------------------------------------------------


def add_schema(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `memory-watchdog schema apply` (the CLI's COMMANDS registry calls this)."""
    from watchdog.cli.main import common_arguments

    p = sub.add_parser("schema", help="print (and with --yes apply) the watchdog's DDL")
    actions = p.add_subparsers(dest="schema_action", metavar="ACTION")
    apply = actions.add_parser(
        "apply", help="state tables; with --materialize the narrow memory_events table"
    )
    common_arguments(apply)
    apply.add_argument(
        "--materialize",
        action="store_true",
        help="also the narrow memory_events table, its materialized view and the backfill",
    )
    apply.add_argument("--yes", action="store_true", help="execute the statements (default: print)")
    apply.add_argument(
        "--since",
        help="backfill this far back from now, e.g. 7d (default: window.lookback)",
    )
    apply.add_argument(
        "--source-local",
        help="on a cluster: the shard-local source table receiving inserts (default: source.table)",
    )
    apply.set_defaults(run=cmd_schema_apply)
    p.set_defaults(run=_schema_usage)


def _schema_usage(args: argparse.Namespace) -> int:
    raise UsageError("schema: an action is required (apply; see memory-watchdog schema --help)")


def _read_source(store: Store, table: str) -> tuple[set[str], str | None]:
    """The source table's columns and its TTL interval, if any."""
    present = set(store.table_columns(table))
    database, _, name = table.rpartition(".")
    rows = store.query(
        "SELECT engine_full FROM system.tables"
        " WHERE database = if({db:String} = '', currentDatabase(), {db:String}) AND name = {name:String}",
        {"db": database, "name": name},
    ).rows
    return present, source_ttl(str(rows[0][0])) if rows else None


def cmd_schema_apply(args: argparse.Namespace) -> int:
    """Print the statements; with --yes execute them in order."""
    from watchdog.cli.main import load
    from watchdog.core.store import open_configured
    from watchdog.runner.once import checks_for, system_clock

    settings = load(args)
    if args.since:
        try:
            since_length = parse_duration(args.since)
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
    else:
        since_length = settings.window.lookback
    if since_length <= timedelta(0):
        raise UsageError("--since: must be positive")
    out = sys.stdout
    statements = state_statements(settings)
    if not args.materialize and not args.yes:
        # The state tables' DDL needs no store: print it without opening one.
        _print(out, statements, None, settings, executing=False)
        return 0
    with open_configured(settings.store) as store:
        plan = None
        if args.materialize:
            specs = checks_for(settings)
            source_table = settings.source.table or PRESETS[settings.source.preset].default_table
            present, ttl = _read_source(store, source_table)
            plan = plan_for(settings, ttl=ttl, source_local=args.source_local)
            until = system_clock().astimezone(UTC).replace(microsecond=0)
            statements += materialize_statements(
                settings, plan, present, specs, since=until - since_length, until=until
            )
        _print(out, statements, plan, settings, executing=args.yes)
        if not args.yes:
            return 0
        for statement in statements:
            store.command(statement.sql, statement.params)
        out.write(f"-- Applied {len(statements)} statements to {store.url.masked}.\n")
    return 0


def _print(
    out: Any,
    statements: Sequence[Statement],
    plan: NarrowPlan | None,
    settings: Settings,
    *,
    executing: bool,
) -> None:
    """Write the statements as a clickhouse-client script, with what to do next."""
    for statement in statements:
        out.write(statement.render() + "\n\n")
    if plan is not None:
        out.write(_next_steps(settings, plan))
    if not executing:
        out.write("-- Printed only; run again with --yes to execute these statements.\n")


def _next_steps(settings: Settings, plan: NarrowPlan) -> str:
    notes = [
        "-- Then read the narrow table: in the config,",
        "--   [source]",
        '--   preset = "normalized"',
        f'--   table = "{plan.table}"',
        f'--   name = "{settings.source.name or plan.source_table}"   # keeps alert history',
    ]
    if settings.source.session_filter:
        notes.append(
            "-- source.session_filter reads raw columns the narrow table does not keep:"
            " rewrite it on the normalized columns."
        )
    if plan.cluster and plan.source_local == plan.source_table:
        notes.append(
            "-- On a cluster, attach the view to the shard-local table that receives inserts"
            " (--source-local), not to a Distributed table."
        )
    return "\n".join(notes) + "\n\n"
