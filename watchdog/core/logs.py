"""Logging for every process of the watchdog: our own lines on stderr, third parties only with --debug.

What the daemon's lines say: docs/operations.md#the-daemon.
"""

from __future__ import annotations

import logging

OWN_LOGGERS = ("watchdog", "checks", "alerts", "benchmarks")


def _own_records(record: logging.LogRecord) -> bool:
    return record.name.split(".")[0] in OWN_LOGGERS or record.levelno >= logging.CRITICAL


def configure_logging(debug: bool) -> None:
    """Our own warnings on stderr; third-party chatter only with --debug (errors are one line).

    A filter on the handler rather than logger levels: libraries such as
    clickhouse-connect set their loggers' levels when imported.
    """
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_own_records)
