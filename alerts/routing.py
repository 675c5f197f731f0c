"""Routes: which receivers an alert goes to, by its severity and check id (`[[alerts.routes]]`).

As in Alertmanager: tried in order, the first that matches decides, `continue = true` adds the
next matching routes' receivers; an alert no route matches goes to `alerts.default_receivers`,
else to every receiver, as does every alert when there are no routes
(docs/alerts.md#receivers-and-routes). The config loader has already checked that every name
is a receiver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from watchdog.core.settings import AlertSettings, RouteSettings


@dataclass(frozen=True)
class Router:
    """The routes of `[alerts]`, and where an alert no route matches goes."""

    routes: tuple[RouteSettings, ...] = ()
    default: tuple[str, ...] | None = None  # None: every receiver

    @classmethod
    def of(cls, settings: AlertSettings) -> Router:
        return cls(settings.routes, settings.default_receivers)

    def receivers(self, severity: str, check_id: str) -> tuple[str, ...] | None:
        """The receivers of an alert, in route order; None means every receiver."""
        picked: list[str] = []
        for route in self.routes:
            if not route.matches(severity, check_id):
                continue
            picked += [name for name in route.receivers if name not in picked]
            if not route.continue_:
                return tuple(picked)
        if picked:
            return tuple(picked)
        return self.default

    def takes(self, receiver: str, severity: str, check_id: str) -> bool:
        """Whether `receiver` gets an alert of this severity and check id."""
        chosen = self.receivers(severity, check_id)
        return chosen is None or receiver in chosen

    def describe(self, every: Sequence[str]) -> list[str]:
        """One line per route and one for the default, for `config check`."""
        lines = []
        for route in self.routes:
            severity = "|".join(route.severity) or "any severity"
            checks = ", ".join(route.checks) or "any check"
            more = " (continue)" if route.continue_ else ""
            lines.append(f"{severity}, {checks} -> {', '.join(route.receivers)}{more}")
        default = self.default if self.default is not None else tuple(every)
        lines.append(f"otherwise -> {', '.join(default) or 'nobody (no receiver configured)'}")
        return lines
