"""The store is down: the `store` alert goes straight to the notifiers, once per outage.

The outbox lives in the store, so while the store cannot be used the daemon
cannot queue the `store` alert the usual way. It renders the alert with the
configured templates and routes and sends it directly to each receiver not
yet told (the spool, watchdog.daemon.spool, remembers who was, also across
restarts). A receiver that fails is tried again at the next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from alerts.base import Deadline, Notifier, Timer
from alerts.lifecycle import STORE_CHECK, Cause, Kind, Notification
from alerts.outbox import compose
from alerts.pipeline import source_unreadable
from alerts.render import templates
from alerts.routing import Router
from checks.base import Window
from watchdog.core.errors import ConfigError
from watchdog.core.links import page_link
from watchdog.core.settings import Settings

log = logging.getLogger(__name__)


def announce_store_down(
    settings: Settings,
    untold: Mapping[str, Notifier],
    window: Window,
    problem: str,
    *,
    now: datetime,
    timer: Timer | None,
) -> tuple[list[str], int]:
    """Send the `store` alert of `window` to the receivers in `untold`: the names of those
    told, and how many failed (each said in one warning line)."""
    notification = Notification(
        kind=Kind.FIRE,
        source=settings.source.display_name,
        check_id=STORE_CHECK,
        cause=Cause.ERROR,
        result=source_unreadable(problem),
        window=window,
        firing_since=window.at,
    )
    try:
        rows = compose(
            [notification],
            untold,
            templates(settings.alerts.templates_dir),
            now=now,
            router=Router.of(settings.alerts),
            link=page_link(settings.report.base_url, window.end),
        )
    except ConfigError as exc:
        log.error("cannot render the store alert: %s", exc)
        return [], 0
    told, failed = [], 0
    for row in rows:
        name = row.notifier
        try:
            untold[name].send(row.message(), Deadline(settings.alerts.delivery_timeout, timer))
        except Exception as exc:  # a receiver failure never stops the daemon
            failed += 1
            log.warning("%s: store alert not delivered (retried next tick): %s", name, exc)
        else:
            told.append(name)
    return told, failed
