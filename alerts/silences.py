"""Silences, as on-call people know them from Alertmanager and Grafana.

A silence covers one check id (or `all`) from `starts_at` to `ends_at`. A
silenced alert still evaluates and changes state; only its announcement
waits, and when the silence ends an alert still firing is announced then.
Silences are judged at the evaluation time, like every other rule.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from alerts.state import (
    SILENCES,
    ensure_schema,
    from_ms_or_none,
    schema_exists,
    select_list,
    table,
    utc,
)
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms

ALL = "all"


@dataclass(frozen=True)
class Silence:
    id: str
    check_id: str  # a check id, `store`, or `all`
    starts_at: datetime
    ends_at: datetime
    created_by: str
    reason: str
    created_at: datetime
    removed_at: datetime | None = None
    version: int = 1

    def covers(self, check_id: str) -> bool:
        return self.check_id in (ALL, check_id)

    def active(self, at: datetime) -> bool:
        return self.removed_at is None and self.starts_at <= at < self.ends_at


def _row(s: Silence) -> list[object]:
    return [
        s.id,
        s.check_id,
        utc(s.starts_at),
        utc(s.ends_at),
        s.created_by,
        s.reason,
        utc(s.created_at),
        utc(s.removed_at),
        s.version,
    ]


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
    store.insert(table(settings, "silences"), [_row(silence)], list(SILENCES))
    return silence


def list_silences(store: Store, settings: Settings) -> list[Silence]:
    """Every silence ever added (removed ones included), newest first."""
    if not schema_exists(store, settings):
        return []
    rows = store.query(
        f"SELECT {select_list(SILENCES)} FROM {table(settings, 'silences')} FINAL"
        " ORDER BY created_at DESC, id"
    ).dicts()
    return [
        Silence(
            id=str(r["id"]),
            check_id=str(r["check_id"]),
            starts_at=from_ms(int(r["starts_at"])),
            ends_at=from_ms(int(r["ends_at"])),
            created_by=str(r["created_by"]),
            reason=str(r["reason"]),
            created_at=from_ms(int(r["created_at"])),
            removed_at=from_ms_or_none(r["removed_at"]),
            version=int(r["version"]),
        )
        for r in rows
    ]


def active_silences(store: Store, settings: Settings, at: datetime) -> list[Silence]:
    """The silences in force at `at`."""
    return [s for s in list_silences(store, settings) if s.active(at)]


def remove_silence(
    store: Store, settings: Settings, silence_id: str, now: datetime
) -> Silence | None:
    """End a silence now; None when there is no such silence (or it was already removed)."""
    found = [s for s in list_silences(store, settings) if s.id == silence_id]
    if not found or found[0].removed_at is not None:
        return None
    old = found[0]
    removed = replace(old, removed_at=now, version=old.version + 1)
    store.insert(table(settings, "silences"), [_row(removed)], list(SILENCES))
    return removed


def silenced_until(silences: list[Silence], check_id: str, at: datetime) -> datetime | None:
    """The latest end among the silences covering `check_id` at `at`, or None."""
    ends = [s.ends_at for s in silences if s.covers(check_id) and s.active(at)]
    return max(ends) if ends else None
