"""The demo's run: a fresh demo table, realistic telemetry with known faults, a check and its page.

It writes only to an embedded store of its own, into a table it created and marks as its own
(docs/spec.md#7-command-line); the page: docs/operations.md#the-triage-page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from alerts.state import clear_source
from checks.base import Report
from checks.source_ddl import create_table_sql
from watchdog.core.errors import UsageError
from watchdog.core.settings import DEMO_STORE_DIR, Settings
from watchdog.core.store import Store, open_configured
from watchdog.demo.data import merge_retries, write_demo
from watchdog.demo.model import DemoPlan
from watchdog.report.files import LATEST, write_reports
from watchdog.report.history import replay_history
from watchdog.runner.once import run_once, window_at

DEMO_TABLE = "joelclaw.otel_events"
DEMO_MARK = "memory-watchdog demo data"


def demo_store_url(settings: Settings) -> str:
    """The demo's own embedded store, beside the default one."""
    return f"chdb://{settings.data_dir / DEMO_STORE_DIR}"


def demo_settings(settings: Settings) -> Settings:
    """The settings with the demo's source: the joelclaw preset on its table."""
    source = settings.source.model_copy(update={"preset": "joelclaw", "table": DEMO_TABLE})
    return settings.model_copy(update={"source": source})


def fresh_demo_table(store: Store) -> None:
    """An empty demo table, marked as ours; never touch a table the demo did not create."""
    database, _, table = DEMO_TABLE.partition(".")
    found = store.query(
        "SELECT comment FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": database, "t": table},
    ).rows
    if found and found[0][0] != DEMO_MARK:
        raise UsageError(
            f"--store: {store.url.masked} already has a table {DEMO_TABLE} the demo did not"
            " create; choose another --store"
        )
    store.command(f"DROP TABLE IF EXISTS {DEMO_TABLE}")
    store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    # No retention TTL: a replayed `--at` older than it would be deleted as it is written.
    store.command(create_table_sql("joelclaw", DEMO_TABLE, ttl=False))
    store.command(f"ALTER TABLE {DEMO_TABLE} MODIFY COMMENT '{DEMO_MARK}'")


def report_dir(settings: Settings) -> Path:
    """The demo's HTML report beside its store: <store>-report/report.html."""
    store_dir = Path(settings.store.url.removeprefix("chdb://"))
    if not store_dir.is_absolute():  # chdb://memory
        return settings.data_dir / "demo-report"
    return store_dir.with_name(store_dir.name + "-report")


def write_demo_report(
    store: Store, settings: Settings, report: Report, directory: Path, now: datetime
) -> Path:
    """The demo's page under `directory`: triage, and history replayed over the demo's data."""
    # The demo data covers the lookback before `at`: every earlier window in it is judged.
    earlier = max(0, settings.window.lookback // report.window.length - 1)
    history = replay_history(store, settings, report, min(earlier, settings.report.history - 1))
    own = settings.model_copy(
        update={"report": settings.report.model_copy(update={"dir": str(directory)})}
    )
    write_reports(report, history, own, now)
    return directory / LATEST


@dataclass(frozen=True)
class DemoRun:
    plan: DemoPlan
    report: Report
    page: Path


def run_demo(settings: Settings, *, sessions: int, seed: int, at: datetime) -> DemoRun:
    """Write the demo's telemetry into its store, evaluate the window ending at `at`, write its page."""
    with open_configured(settings.store, create=True) as store:
        fresh_demo_table(store)
        # New telemetry, so its alerts start over: a `check --notify` run on the last demo
        # would make `--at` runs on this one "already processed".
        clear_source(store, settings, settings.source.display_name)
        plan = write_demo(store, DEMO_TABLE, sessions=sessions, seed=seed, at=at)
        report = run_once(store, settings, window_at(settings, at), triage=True)
        page = write_demo_report(store, settings, report, report_dir(settings), at)
        # Every retry was counted above; later checks find them merged, whenever they run.
        merge_retries(store, DEMO_TABLE)
    return DemoRun(plan, report, page)
