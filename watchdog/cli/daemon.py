"""`memory-watchdog daemon`: judge every aligned window on the schedule (watchdog.daemon.service).

Its flags (`--http`, `--otlp`, `--otlp-grpc`, `--once`, `--at`, `--stop-timeout`) and what it
does with them: docs/operations.md#the-daemon.
"""

from __future__ import annotations

import argparse
import logging
import os

from prometheus_client import CollectorRegistry, ProcessCollector

from alerts.notifiers import build_notifiers
from watchdog.cli.args import (
    Subparsers,
    common_arguments,
    duration_flag,
    judged,
    load,
    package_version,
    require_secrets,
    time_flag,
)
from watchdog.cli.epilog import helped
from watchdog.core.durations import format_duration
from watchdog.core.errors import ConfigError, UsageError
from watchdog.core.logs import LogSetup
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.settings.load import config_file
from watchdog.core.times import system_clock
from watchdog.daemon.child import ChildTicks
from watchdog.daemon.ingest.loader import ChildLoads
from watchdog.daemon.ingest.metrics import IngestCollector
from watchdog.daemon.ingest.service import Ingest, TurnTakingTicks
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.reload import settled
from watchdog.daemon.service import DEFAULT_STOP_TIMEOUT, Daemon, Running
from watchdog.daemon.serving import Serving
from watchdog.daemon.spool import Spool
from watchdog.daemon.systemd import Notify
from watchdog.daemon.telemetry import Telemetry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve the pages, /healthz, /status and /metrics"
        " (e.g. 127.0.0.1:8787; loopback by default)",
    )
    parser.add_argument(
        "--otlp",
        metavar="HOST:PORT",
        help="receive OpenTelemetry logs and traces over OTLP/HTTP and store them as the"
        " Collector's ClickHouse exporter does (e.g. 127.0.0.1:4318; [ingest] in the config)",
    )
    parser.add_argument(
        "--otlp-grpc",
        metavar="HOST:PORT",
        help="receive OpenTelemetry logs and traces over OTLP/gRPC, as --otlp does over HTTP"
        " (e.g. 127.0.0.1:4317; [ingest] grpc_listen in the config)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="run one tick in this process and exit (0 ok, 1 breach, 3 store): for cron or"
        " to time a tick",
    )
    parser.add_argument(
        "--at",
        help="with --once: the tick's time, RFC 3339 (default: now); judges the window due then",
    )
    parser.add_argument(
        "--stop-timeout",
        default=format_duration(DEFAULT_STOP_TIMEOUT),
        help="on SIGTERM/SIGINT, how long the run in progress may take to finish (default 90s)",
    )


def cmd_daemon(args: argparse.Namespace) -> int:
    """Evaluate on the schedule until stopped; exit 0 on SIGTERM/SIGINT; SIGHUP reloads the config."""
    stop_timeout = duration_flag("--stop-timeout", args.stop_timeout)
    if args.at and not args.once:
        raise UsageError("--at: only with --once (the daemon runs on the wall clock)")
    for flag, given in (("--otlp", args.otlp), ("--otlp-grpc", args.otlp_grpc)):
        if args.once and given:
            raise UsageError(f"{flag}: not with --once (one tick receives nothing; run the daemon)")
    at = time_flag("--at", args.at) if args.at else None

    def load_checked() -> Settings:
        """The config from --config/WATCHDOG_CONFIG, --store, --otlp and --otlp-grpc, as at start
        (and on SIGHUP)."""
        loaded = load(args)
        require_secrets(loaded)  # the daemon sends: fail at start, not at the first alert
        return judged(receiving(loaded, args.otlp, args.otlp_grpc))

    settings = load_checked()
    schedule = Schedule.from_settings(settings.schedule)
    logging.getLogger("watchdog").setLevel(logging.DEBUG if args.debug else logging.INFO)
    source = settings.source.display_name
    telemetry = Telemetry.from_environment(os.environ, source=source)
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # the daemon's own memory, CPU and open files
    notifiers = build_notifiers(settings)
    metrics = Metrics(registry, source=source, version=package_version(), receivers=notifiers)
    systemd = Notify.from_environment(os.environ)
    # systemd's variables are for this process, not its tick processes (sd_notify's "unset").
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        os.environ.pop(name, None)
    if args.once:  # one tick, in this process: no child, no schedule, no HTTP
        return Daemon(
            settings,
            schedule=schedule,
            spool=Spool.for_settings(settings),
            outputs=Outputs(telemetry, metrics, Notify()),
            notifiers=notifiers,
            running=Running(
                clock=system_clock if at is None else (lambda: at),
                logs=LogSetup(args.debug, args.log_format),
            ),
        ).once()
    listen, grpc_listen = settings.ingest.listen, settings.ingest.grpc_listen
    ingest = None
    if settings.ingest.listens:
        ingest = Ingest(
            settings,
            loads=ChildLoads(settings.store.query_timeout * 2),
            logs=LogSetup(args.debug, args.log_format),
        )
        registry.register(IngestCollector(ingest))
    # With a receiver, the daemon's runs and the loads take turns with the store.
    ticks = ChildTicks() if ingest is None else TurnTakingTicks(ingest)
    daemon = Daemon(
        settings,
        schedule=schedule,
        spool=Spool.for_settings(settings),
        outputs=Outputs(telemetry, metrics, systemd),
        notifiers=notifiers,
        running=Running(ticks=ticks, logs=LogSetup(args.debug, args.log_format)),
        serving=Serving(
            http=args.http,
            receiver=None if ingest is None else ingest.spool_state,
            reload=settled(load_checked, config_file(args.config)),
        ),
    )
    if ingest is None:
        return daemon.serve(stop_timeout)
    ingest.start(listen, grpc_listen)
    try:
        return daemon.serve(stop_timeout)
    finally:
        ingest.stop()


def receiving(settings: Settings, otlp: str | None, otlp_grpc: str | None = None) -> Settings:
    """The settings with `--otlp` and `--otlp-grpc` applied; a receiver off loopback needs its
    token set."""
    for flag, listen in (("--otlp", otlp), ("--otlp-grpc", otlp_grpc)):
        if listen is not None:
            try:
                settings.ingest.require_token_for(listen)
            except ValueError as exc:
                raise UsageError(f"{flag}: {exc}") from None
    if otlp is not None or otlp_grpc is not None:
        settings = settings.receiving(otlp, otlp_grpc)
    missing = settings.ingest.missing_token
    if settings.ingest.listens and missing is not None:
        raise ConfigError(missing.key, f"environment variable {missing.variable} is not set")
    return settings


def add_daemon(sub: Subparsers) -> None:
    """Register `memory-watchdog daemon` (the CLI's COMMANDS registry calls this)."""
    p = sub.add_parser(
        "daemon",
        help="evaluate every aligned window on the schedule, alert, survive outages"
        " (SIGTERM stops, SIGHUP reloads the config)",
        **helped(
            (
                ("daemon --config /etc/memory-watchdog/watchdog.toml", "run on the schedule"),
                (
                    "daemon --http 127.0.0.1:8787 --log-format json",
                    "serve /healthz and /metrics; log one JSON object a line",
                ),
                ("daemon --otlp 127.0.0.1:4318", "also receive OTLP/HTTP logs and traces"),
                ("daemon --once --at 2026-11-28T04:00:00Z", "one tick, then exit (cron, tests)"),
            ),
            (
                (0, "stopped by SIGTERM or SIGINT; with --once: no check breached"),
                (1, "with --once: a check breached or could not be evaluated"),
                (2, "usage or config error at start (a reload keeps the config it has)"),
                (3, "with --once: the store could not be read (the daemon itself rides it out)"),
            ),
        ),
    )
    common_arguments(p)
    add_arguments(p)
    p.set_defaults(run=cmd_daemon)
