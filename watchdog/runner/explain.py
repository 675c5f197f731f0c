"""One session explained, from settings: its events and obligations before `at` (checks.explain).

The checks are the configured ones, and the lookback is the one `check --at`
reads at `at` (docs/spec.md#9-looking-back-backtest-and-explain).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from checks.builtin import configured_checks
from checks.explain import Explained, explain_session, session_of_event
from checks.kinds import session_scopes
from checks.sources import open_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import window_at


def explain(
    store: Store,
    settings: Settings,
    session_id: str,
    at: datetime,
    length: timedelta | None = None,
) -> Explained:
    """The session's events in the lookback before `at`, and every obligation it had.

    The window and lookback are the ones `check --at` (with `--window`: `length`) judges
    and reads at `at`. An id no session has that is an
    event's explains that event's session, the event marked (`Explained.marked`; with no
    session: no events, the session id '').
    """
    specs = configured_checks(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    window = window_at(settings, at, length)
    explained = explain_session(store, source, window, specs, session_id)
    if explained.events:
        return explained
    # No session of that id: an event id (evidence lists them) explains its session.
    found = session_of_event(store, source, window, session_id)
    if found is None:
        return explained
    if not found:
        return replace(explained, session_id="", marked=session_id)
    return replace(explain_session(store, source, window, specs, found), marked=session_id)
