"""`[ingest]` in the config: every command reads the table the receiver fills."""

from __future__ import annotations

from pathlib import Path

from watchdog.core.settings import settings_from_mapping
from watchdog.runner.plugins import PLUGINS


def test_listen_without_a_source_reads_the_receivers_logs_table(tmp_path: Path) -> None:
    """`[ingest] listen` and no [source]: check, status and the daemon read otel_logs on logs_table."""
    settings = settings_from_mapping(
        {"ingest": {"listen": "127.0.0.1:4318", "logs_table": "agents.logs"}},
        plugins=PLUGINS,
        env={"HOME": str(tmp_path)},
    )
    assert (settings.source.preset, settings.source.table) == ("otel_logs", "agents.logs")


def test_a_named_source_stays_beside_the_receiver(tmp_path: Path) -> None:
    """A [source] the config names is kept: the receiver fills its tables, the checks read that one."""
    settings = settings_from_mapping(
        {"ingest": {"listen": "127.0.0.1:4318"}, "source": {"table": "joelclaw.otel_events"}},
        plugins=PLUGINS,
        env={"HOME": str(tmp_path)},
    )
    assert (settings.source.preset, settings.source.table) == ("joelclaw", "joelclaw.otel_events")


def test_without_listen_the_source_is_the_default(tmp_path: Path) -> None:
    """No receiver configured: the default source (the joelclaw preset) is untouched."""
    settings = settings_from_mapping({}, plugins=PLUGINS, env={"HOME": str(tmp_path)})
    assert settings.source.preset == "joelclaw"
