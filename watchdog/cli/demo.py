"""`memory-watchdog demo`: realistic telemetry with known faults, then a real check."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from checks.source_ddl import create_table_sql
from watchdog.core.errors import UsageError
from watchdog.core.settings import default_data_dir
from watchdog.core.store import Store, open_configured

DEMO_TABLE = "joelclaw.otel_events"
DEMO_MARK = "memory-watchdog demo data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sessions", type=int, default=500, help="agent sessions to generate (default 500)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed, for a repeatable run (default 0)"
    )
    parser.add_argument("--at", help="evaluation time, RFC 3339 (default: now)")


def default_demo_store() -> str:
    return f"chdb://{default_data_dir() / 'demo-store'}"


def _fresh_demo_table(store: Store) -> None:
    """An empty demo table, marked as ours; never touch a table the demo did not create."""
    database, _, table = DEMO_TABLE.partition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": database, "t": table},
    ).rows
    if found and found[0][0] != DEMO_MARK:
        raise UsageError(
            f"--store: {store.url.masked} already has a {DEMO_TABLE} table the demo did not"
            " create; choose another --store"
        )
    store.command(f"DROP TABLE IF EXISTS {DEMO_TABLE}")
    store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    store.command(create_table_sql("joelclaw", DEMO_TABLE))
    store.command(f"ALTER TABLE {DEMO_TABLE} MODIFY COMMENT '{DEMO_MARK}'")


def _report_dir(store_url: str) -> Path:
    """The demo's HTML report beside its store: <store>-report/report.html."""
    store_dir = Path(store_url.removeprefix("chdb://"))
    if not store_dir.is_absolute():  # chdb://memory
        return default_data_dir() / "demo-report"
    return store_dir.with_name(store_dir.name + "-report")


def cmd_demo(args: argparse.Namespace) -> int:
    from checks.base import Report
    from watchdog.cli.main import load, parse_time, render
    from watchdog.demo.data import write_demo
    from watchdog.report.page import write_demo_report
    from watchdog.runner.once import run_once, window_at

    if args.sessions < 100:
        raise UsageError("--sessions: must be at least 100 (the injected faults need room)")
    args.store = args.store or default_demo_store()
    if not args.store.startswith("chdb://"):
        raise UsageError("--store: the demo writes only to an embedded store (chdb:///path)")
    at = parse_time(args.at) if args.at else datetime.now(UTC).replace(microsecond=0)
    settings = load(args)
    settings = settings.model_copy(
        update={
            "source": settings.source.model_copy(update={"preset": "joelclaw", "table": DEMO_TABLE})
        }
    )
    store_cfg = settings.store
    with open_configured(store_cfg) as store:
        _fresh_demo_table(store)
        plan = write_demo(store, DEMO_TABLE, sessions=args.sessions, seed=args.seed, at=at)
        report: Report = run_once(store, settings, window_at(settings, at))
        page = write_demo_report(store, settings, report, _report_dir(store_cfg.url), at)
    out = sys.stdout
    out.write(
        f"Wrote {plan.events} events of {plan.sessions} agent sessions (seed {args.seed}) into"
        f" {DEMO_TABLE} in {store_cfg.url}\n"
        f"Injected: {plan.cold_sessions} cold sessions, {plan.late_recalls} late recalls,"
        f" {plan.crashed_sessions} crashed sessions, {plan.ended_without_observe} ended without observe,"
        f" {plan.unobserved_compactions} unobserved compactions, {plan.lost_observes} lost and"
        f" {plan.failed_observes} failed observes, a failure streak of {plan.failure_streak},"
        f" {plan.slow_recalls} slow recalls, {plan.deviation_breaches} deviation contract breaches,"
        f" {plan.deviation_missing_evidence} deviations citing missing ids, {plan.duplicates} duplicate rows.\n\n"
    )
    out.write(render(report, "text", color=out.isatty()))
    at_text = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.write(
        "\nWhat next:\n"
        f"  memory-watchdog check --store {store_cfg.url} --at {at_text} --format json\n"
        f"  memory-watchdog check --store {store_cfg.url} --at {at_text} --window 24h\n"
        "  memory-watchdog check --store 'http://user:password@your-clickhouse:8123/default'"
        " --config config/watchdog.toml\n"
        f"\nHTML report (open it in a browser): {page}\n"
    )
    return 0
