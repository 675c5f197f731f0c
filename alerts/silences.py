"""Silences, as on-call people know them from Alertmanager and Grafana.

A silence covers one check id (or `all`) from `starts_at` to `ends_at`. A silenced alert still
evaluates and changes state; only its announcement waits, and when the silence ends an alert
still firing is announced then. As in Alertmanager, silences apply when a message is sent: a
run holds what the silences in force when it runs cover, and each send leaves out the alerts
of silences added since (docs/alerts.md#silences).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from alerts.rows import ALL, Silence
from alerts.state import SILENCES, ensure_schema, schema_exists, table
from watchdog.core.settings import Settings
from watchdog.core.store import Store

__all__ = ["ALL", "Silence", "add_silence", "list_silences", "remove_silence"]


def _insert(store: Store, settings: Settings, silence: Silence) -> None:
    store.insert(table(settings, "silences"), [SILENCES.row(silence)], list(SILENCES.columns))


def add_silence(
    store: Store,
    settings: Settings,
    *,
    check_id: str,
    ends_at: datetime,
    reason: str,
    created_by: str,
    now: datetime,
) -> Silence:
    """Silence `check_id` (or `all`) from `now` until `ends_at`."""
    ensure_schema(store, settings)
    silence = Silence(
        id=secrets.token_hex(4),
        check_id=check_id,
        starts_at=now,
        ends_at=ends_at,
        created_by=created_by,
        reason=reason,
        created_at=now,
    )
    _insert(store, settings, silence)
    return silence


def list_silences(store: Store, settings: Settings) -> list[Silence]:
    """Every silence ever added (removed ones included), newest first."""
    if not schema_exists(store, settings):
        return []
    rows = store.query(
        f"SELECT {SILENCES.select()} FROM {table(settings, 'silences')} FINAL"
        " ORDER BY created_at DESC, id"
    ).dicts()
    return [SILENCES.decode(r) for r in rows]


def silences_in_force(store: Store, settings: Settings, now: datetime) -> list[Silence]:
    """The silences in force at `now` (the wall clock of a run or a send), or added since."""
    return [s for s in list_silences(store, settings) if s.in_force_from(now)]


def remove_silence(
    store: Store, settings: Settings, silence_id: str, now: datetime
) -> Silence | None:
    """End a silence now; None when there is no such silence (or it was already removed)."""
    found = [s for s in list_silences(store, settings) if s.id == silence_id]
    if not found or found[0].removed_at is not None:
        return None
    old = found[0]
    removed = replace(old, removed_at=now, version=old.version + 1)
    _insert(store, settings, removed)
    return removed


def silenced_until(silences: Sequence[Silence], check_id: str) -> datetime | None:
    """The latest end among `silences` (those in force) covering `check_id`, or None."""
    ends = [s.ends_at for s in silences if s.covers(check_id)]
    return max(ends) if ends else None
