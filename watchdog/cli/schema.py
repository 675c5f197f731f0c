"""`memory-watchdog schema apply`: print (and with --yes apply) the watchdog's DDL.

Without `--materialize`: the watchdog's state tables (alert states, outbox, run log, silences)
in `store.database` (docs/alerts.md#where-the-state-lives). With it, also the narrow
normalized-event table, its materialized view and the backfill (`checks.materialize` builds
those statements, `checks.backfill` runs the backfill under --yes, chunk by chunk and
resumable, one run at a time under the backfill's lock in the store;
docs/performance.md#a-narrow-table-for-large-deployments).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

from alerts.lease import Lease, LeaseInfo, LeaseLost, holder_name
from alerts.state import TABLES, create_table_sql
from checks.backfill import CHUNK, Backfill
from checks.builtin import configured_checks
from checks.materialize import (
    BackfillSql,
    NarrowPlan,
    Statement,
    materialize_statements,
    plan_for,
    replacing_of,
    source_ttl,
)
from checks.sources import SourceSchemaError
from watchdog.cli.args import Subparsers, common_arguments, duration_flag, judged, load
from watchdog.cli.epilog import PLAIN_EXITS, helped
from watchdog.core.errors import StoreError, StoreLockedError, UsageError
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_configured
from watchdog.core.times import rfc3339, system_clock


def state_statements(settings: Settings) -> list[Statement]:
    """The watchdog's own tables (alert states, outbox, run log, silences)."""
    statements = [
        Statement(
            "The watchdog's database.",
            f"CREATE DATABASE IF NOT EXISTS `{settings.store.database}`",
        )
    ]
    for name in TABLES:
        statements.append(Statement(f"State table {name}.", create_table_sql(settings, name)))
    return statements


APPLY_EXAMPLES = (
    ("schema apply", "print the statements that create the watchdog's tables"),
    ("schema apply --yes", "run them on the store"),
    ("schema apply --materialize --since 7d --yes", "also the narrow table, backfilled a week"),
)


def add_schema(sub: Subparsers) -> None:
    """Register `memory-watchdog schema apply` (the CLI's COMMANDS registry calls this)."""
    p = sub.add_parser(
        "schema",
        help="print (and with --yes apply) the watchdog's DDL",
        **helped(APPLY_EXAMPLES, PLAIN_EXITS),
    )
    actions = p.add_subparsers(dest="schema_action", metavar="ACTION")
    apply = actions.add_parser(
        "apply",
        help="state tables; with --materialize the narrow memory_events table",
        **helped(APPLY_EXAMPLES, PLAIN_EXITS),
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
        "--chunk",
        help="with --yes, backfill this much of the source's time at a time, e.g. 1h, 1d"
        " (default 1h); an interrupted backfill resumes where it stopped",
    )
    apply.add_argument(
        "--source-local",
        help="on a cluster: the shard-local source table receiving inserts (default: source.table)",
    )
    apply.set_defaults(run=cmd_schema_apply)
    p.set_defaults(run=_schema_usage)


def _schema_usage(args: argparse.Namespace) -> int:
    raise UsageError("schema: an action is required (apply; see memory-watchdog schema --help)")


def _read_source(store: Store, table: str) -> tuple[dict[str, str], str | None]:
    """The source table's columns (name -> type) and its TTL interval, if any."""
    present = store.table_columns(table)
    database, _, name = table.rpartition(".")
    rows = store.query(
        "SELECT engine_full FROM system.tables"
        " WHERE database = if({db:String} = '', currentDatabase(), {db:String}) AND name = {name:String}",
        {"db": database, "name": name},
    ).rows
    return present, source_ttl(str(rows[0][0])) if rows else None


def cmd_schema_apply(args: argparse.Namespace) -> int:
    """Print the statements; with --yes execute them in order."""
    settings = load(args)
    if args.materialize:  # the state of the source every command judges
        settings = judged(settings)
    since_length = duration_flag("--since", args.since) if args.since else settings.window.lookback
    out = sys.stdout
    statements = state_statements(settings)
    if not args.materialize and not args.yes:
        # The state tables' DDL needs no store: print it without opening one.
        _print(out, statements, None, settings, executing=False)
        return 0
    chunk = duration_flag("--chunk", args.chunk) if args.chunk else CHUNK
    with open_configured(settings.store, create=args.yes) as store:
        plan = backfill = None
        now = system_clock().astimezone(UTC).replace(microsecond=0)
        if args.materialize:
            specs = configured_checks(settings)
            source_table = settings.source.table_name
            present, ttl = _read_source(store, source_table)
            plan = plan_for(settings, ttl=ttl, source_local=args.source_local)
            try:
                # The views before the backfill, the backfill open-ended: nothing inserted
                # meanwhile, nor stamped ahead of the clock, is missed.
                statements += materialize_statements(
                    settings,
                    plan,
                    present,
                    specs,
                    since=now - since_length,
                    replacing=replacing_of(store, plan.source_local),
                )
                backfill = Backfill(BackfillSql.of(settings, plan, present, specs))
            except SourceSchemaError as exc:
                raise StoreError(store.url.masked, str(exc)) from None
        lock = None
        if plan is not None and backfill is not None and args.yes:
            lock = _backfill_lock(store, settings, plan)
        _print(out, statements, plan, settings, executing=args.yes)
        if not args.yes:
            return 0
        try:
            ddl = statements[:-1] if backfill is not None else statements
            for statement in ddl:
                store.command(statement.sql, statement.params)
            out.write(f"-- Applied {len(ddl)} statements to {store.url.masked}.\n")
            if backfill is not None and lock is not None:
                out.flush()
                copied = backfill.run(
                    store,
                    since=now - since_length,
                    now=now,
                    every=chunk,
                    say=_say(out),
                    guard=lock.ensure,
                )
                out.write(f"-- Backfilled {copied} rows.\n")
        except LeaseLost as lost:
            assert plan is not None  # only the backfill's lock is lost
            raise _busy(store, plan, lost.holder, "took over: this run stopped") from None
        finally:
            if lock is not None:
                lock.release()
    return 0


def _backfill_lock(store: Store, settings: Settings, plan: NarrowPlan) -> Lease:
    """The backfill's lock, held: one `schema apply --materialize --yes` of a narrow table at a
    time, as two sharing its staging table would double rows and lose others. It is a lease in
    the store's `leases` table, renewed before each statement of the backfill and let go at
    its end; one a killed run left expires after its TTL (`alerts.lease_ttl`, at least twice
    `store.query_timeout`). StoreLockedError (exit 3) naming the holder while another run holds
    it. The embedded store needs none: its lock lets one process in at a time."""
    ttl = max(settings.alerts.lease_ttl, 2 * settings.store.query_timeout)
    key = f"backfill {plan.storage}"
    lease = Lease(store, settings, holder_name("schema"), key=key, ttl=ttl)
    holder = lease.acquire()
    if holder is not None:
        raise _busy(store, plan, holder, "is running")
    return lease


def _busy(store: Store, plan: NarrowPlan, holder: LeaseInfo | None, what: str) -> StoreLockedError:
    """The one line of a backfill another run holds."""
    who = (
        f"{holder.holder} holds it until {rfc3339(holder.expires_at)} (renewed while it runs;"
        " a run that died lets it go then)"
        if holder is not None
        else "it is held by no run"
    )
    return StoreLockedError(
        store.url.masked,
        f"another backfill of {plan.storage} {what}: {who}; run again once it has ended",
    )


def _say(out: Any) -> Callable[[str], None]:
    """A progress line at once (a long backfill shows where it is)."""

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    return say


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
        f'--   state = "{plan.database}.session_state"   # the session checks read the state',
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
