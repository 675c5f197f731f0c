"""One evaluation, from settings to Report: thin, with its collaborators handed in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from checks.base import Report, Window
from checks.builtin import configured_checks
from checks.evaluate import QueryTimer, evaluate
from checks.kinds import CheckSpec, Coverage
from checks.sources import open_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class FrozenClock:
    """A clock that always says the same time (tests, replays)."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


def window_at(settings: Settings, at: datetime, length: timedelta | None = None) -> Window:
    """The evaluation window ending at `at`.

    A window longer than the configured one (`--window 24h`) reads further
    back too, so that every obligation due in it can still be judged.
    """
    w = settings.window
    length = length or w.length
    reach = length + max(w.idle_timeout, w.recall_grace, w.observe_grace)
    return Window(at=at.astimezone(UTC), length=length, lookback=max(w.lookback, reach))


def checks_for(settings: Settings) -> list[CheckSpec]:
    return configured_checks(settings)


def run_once(
    store: Store, settings: Settings, window: Window, *, timed: QueryTimer | None = None
) -> Report:
    """Evaluate every configured check over `window` on the store's source."""
    specs = checks_for(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    return evaluate(store, source, window, specs, timed=timed)


def session_scopes(specs: list[CheckSpec]) -> dict[str, str]:
    """The session filters of checks that narrow their own sessions, by check id."""
    return {
        spec.id: spec.params.session_filter
        for spec in specs
        if isinstance(spec.params, Coverage) and spec.params.session_filter
    }
