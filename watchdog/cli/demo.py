"""`memory-watchdog demo`: realistic telemetry with known faults, then a real check.

It writes only to an embedded store of its own, into a table it created
(docs/spec.md#7-command-line); `--via-otlp` sends the telemetry through the watchdog's own OTLP
receiver instead (docs/start-without-clickhouse.md).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from alerts.state import clear_source
from watchdog.cli.args import Subparsers, common_arguments, load, printed, time_flag
from watchdog.cli.check import render
from watchdog.cli.epilog import STORE, USAGE, helped
from watchdog.core.errors import StoreError, UsageError
from watchdog.core.settings import DEMO_POINTER, Settings, command_flags
from watchdog.core.store import open_configured
from watchdog.core.times import system_clock
from watchdog.daemon.ingest.service import Ingest
from watchdog.daemon.ingest.signals import LOGS
from watchdog.demo.data import generate_demo
from watchdog.demo.otlp import (
    DEMO_LOGS_TABLE,
    clear_demo_logs_table,
    mark_demo_logs_table,
    send_events,
)
from watchdog.demo.run import (
    DEMO_TABLE,
    demo_settings,
    demo_store_url,
    report_dir,
    run_demo,
    write_demo_report,
)
from watchdog.runner.once import run_once, window_at

# The last "What next" line: your own data. It names no file: an installed memory-watchdog has
# no repository beside it, and every key of a config file is optional.
YOUR_STORE = (
    "memory-watchdog check --store 'http://user:password@your-clickhouse:8123/default'"
    "   # your own ClickHouse (add --config FILE for what differs from the defaults)"
)


def add_demo(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo",
        help="fill an embedded demo store with realistic telemetry and check it",
        **helped(
            (
                ("demo", "fill the demo store (faults injected) and print its check"),
                ("demo --seed 0 --at 2026-11-30T12:00:00Z", "the same demo every time"),
                ("demo --via-otlp", "send it through the OpenTelemetry SDK and the receiver"),
            ),
            ((0, "the demo store filled and checked (its breaches are the point)"), USAGE, STORE),
        ),
    )
    common_arguments(p)
    p.add_argument(
        "--sessions", type=int, default=500, help="agent sessions to generate (default 500)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="random seed, for a repeatable run (default 0)"
    )
    p.add_argument("--at", help="evaluation time, RFC 3339 (default: now)")
    p.add_argument(
        "--via-otlp",
        action="store_true",
        help="send the telemetry as an agent does, through the OpenTelemetry SDK's OTLP/HTTP"
        " exporter to the watchdog's own receiver, and check the otel_logs table it fills",
    )
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
    if args.via_otlp:
        return demo_via_otlp(settings, sessions=args.sessions, seed=args.seed, at=at)
    settings = demo_settings(settings)
    store_cfg = settings.store
    demo = run_demo(settings, sessions=args.sessions, seed=args.seed, at=at)
    remember_demo_store(settings)
    plan, report, page = demo.plan, demo.report, demo.page
    out = sys.stdout
    out.write(
        f"Wrote {plan.events} events of {plan.sessions} agent sessions (seed {args.seed}) into"
        f" {DEMO_TABLE} in {store_cfg.url}\n"
        f"{plan.injected()}\n"
        "The duplicate rows are memory events written again, as an outbox retry does; they are"
        " merged away after this check, as ReplacingMergeTree does in time.\n\n"
    )
    out.write(render(report, "text", color=out.isatty(), flags=command_flags(settings)))
    at_text = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.write(
        "\nWhat next:\n"
        f"  {printed(settings, f'check --at {at_text} --format json')}\n"
        f"  {printed(settings, f'check --at {at_text} --window 24h')}\n"
        f"  {YOUR_STORE}\n"
        f"\nHTML report (open it in a browser): {page}\n"
    )
    return 0


def demo_via_otlp(settings: Settings, *, sessions: int, seed: int, at: datetime) -> int:
    """The demo's telemetry through the SDK's OTLP exporter and the receiver, then a check."""
    source = settings.source.model_copy(update={"preset": "otel_logs", "table": DEMO_LOGS_TABLE})
    data = generate_demo(sessions=sessions, seed=seed, at=at)
    plan = data.plan
    with (
        open_configured(settings.store, create=True) as store,
        tempfile.TemporaryDirectory(prefix="memory-watchdog-demo-") as spool,
    ):
        clear_demo_logs_table(store)
        ingest_settings = settings.ingest.model_copy(
            update={"logs_table": DEMO_LOGS_TABLE, "spool_dir": spool}
        )
        settings = settings.model_copy(update={"source": source, "ingest": ingest_settings})
        clear_source(store, settings, source.display_name)  # new telemetry: alerts start over
        # The receiver loads into this very store, in this process (no daemon here).
        ingest = Ingest(settings, open_fn=lambda request: contextlib.nullcontext(store))
        server = ingest.start("127.0.0.1:0")
        assert server.http is not None
        host, port = server.http
        try:
            send_events(f"http://{host!s}:{port}", data.events, data.retried)
        finally:
            ingest.stop()
        sent = len(data.events) + len(data.retried)
        if ingest.loaded.rows[LOGS] != sent:
            raise StoreError(
                store.url.masked,
                f"the receiver stored {ingest.loaded.rows[LOGS]} of the {sent} records sent"
                " (see the log lines above)",
            )
        mark_demo_logs_table(store)
        report = run_once(store, settings, window_at(settings, at))
        page = write_demo_report(store, settings, report, report_dir(settings), at)
    config = _write_demo_config(settings)
    remember_demo_store(settings)
    out = sys.stdout
    out.write(
        f"Sent {plan.events} events of {plan.sessions} agent sessions (seed {seed}) as OpenTelemetry"
        " log records, through the SDK's OTLP/HTTP exporter, to the watchdog's receiver;"
        f" it stored them in {DEMO_LOGS_TABLE} in {settings.store.url}\n"
        f"{plan.injected()}\n"
        "The duplicate rows are memory events sent again, as an agent's retry does.\n\n"
    )
    flags = command_flags(settings.read_from(str(config)))
    out.write(render(report, "text", color=out.isatty(), flags=flags))
    at_text = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.write(
        "\nWhat next:\n"
        f"  memory-watchdog check --at {at_text} {flags}\n"
        "  memory-watchdog daemon --otlp 127.0.0.1:4318   # receive your agents' telemetry"
        " (docs/start-without-clickhouse.md)\n"
        f"\nHTML report (open it in a browser): {page}\n"
    )
    return 0


def remember_demo_store(settings: Settings) -> None:
    """Note in the data directory which store the demo filled: "there is no store here" names
    it then, wherever `--store` put it (a data directory that cannot be written: not noted)."""
    with contextlib.suppress(OSError):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        (settings.data_dir / DEMO_POINTER).write_text(settings.store.url + "\n", encoding="utf-8")


def _write_demo_config(settings: Settings) -> Path:
    """A config reading the demo's otel_logs table, beside its report (for the `check` shown)."""
    path = report_dir(settings) / "otlp.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'# Written by memory-watchdog demo --via-otlp\n[source]\npreset = "otel_logs"\n'
        f'table = "{DEMO_LOGS_TABLE}"\n',
        encoding="utf-8",
    )
    return path
