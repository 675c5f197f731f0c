"""One session explained, from settings: its events and obligations before `at` (checks.explain).

The checks are the configured ones, and the lookback is the one `check --at`
reads at `at` (docs/spec.md#9-looking-back-backtest-and-explain).
"""

from __future__ import annotations

from datetime import datetime

from checks.builtin import configured_checks
from checks.explain import Explained, explain_session
from checks.kinds import KINDS
from checks.sources import open_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import window_at


def explain(store: Store, settings: Settings, session_id: str, at: datetime) -> Explained:
    """The session's events in the lookback before `at`, and every obligation it had.

    The lookback is the one `check --at` reads at `at`.
    """
    specs = configured_checks(settings)
    source = open_source(store, settings.source, KINDS.scopes(specs))
    return explain_session(store, source, window_at(settings, at), specs, session_id)
