"""`memory-watchdog demo`: realistic telemetry with known faults, then a real check."""

from __future__ import annotations

import argparse
import sys

from watchdog.cli.args import Subparsers, common_arguments, load, time_flag
from watchdog.cli.check import render
from watchdog.core.errors import UsageError
from watchdog.core.times import system_clock
from watchdog.demo.run import DEMO_TABLE, demo_settings, demo_store_url, run_demo


def add_demo(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo", help="fill an embedded demo store with realistic telemetry and check it"
    )
    common_arguments(p)
    p.add_argument(
        "--sessions", type=int, default=500, help="agent sessions to generate (default 500)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="random seed, for a repeatable run (default 0)"
    )
    p.add_argument("--at", help="evaluation time, RFC 3339 (default: now)")
    p.set_defaults(run=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.sessions < 100:
        raise UsageError("--sessions: must be at least 100 (the injected faults need room)")
    if args.store and not args.store.startswith("chdb://"):
        raise UsageError("--store: the demo writes only to an embedded store (chdb:///path)")
    at = time_flag("--at", args.at) if args.at else system_clock().replace(microsecond=0)
    settings = load(args)
    if not args.store:
        settings = settings.with_store_url(demo_store_url(settings))
    settings = demo_settings(settings)
    store_cfg = settings.store
    demo = run_demo(settings, sessions=args.sessions, seed=args.seed, at=at)
    plan, report, page = demo.plan, demo.report, demo.page
    out = sys.stdout
    out.write(
        f"Wrote {plan.events} events of {plan.sessions} agent sessions (seed {args.seed}) into"
        f" {DEMO_TABLE} in {store_cfg.url}\n"
        f"Injected: {plan.cold_sessions} cold sessions, {plan.late_recalls} late recalls,"
        f" {plan.crashed_sessions} crashed sessions, {plan.ended_without_observe} ended without observe,"
        f" {plan.unobserved_compactions} unobserved compactions, {plan.lost_observes} lost and"
        f" {plan.failed_observes} failed observes, a failure streak of {plan.failure_streak},"
        f" {plan.slow_recalls} slow recalls, {plan.deviation_breaches} deviation contract breaches,"
        f" {plan.deviation_missing_evidence} deviations citing missing ids,"
        f" {plan.answered_without_recall} questions answered without recall,"
        f" {plan.duplicates} duplicate rows (memory events written again, as an outbox retry"
        " does: data_quality.duplicate_rows; merged away after this check, as"
        " ReplacingMergeTree does in time).\n\n"
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
