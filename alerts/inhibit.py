"""Inhibition, as Alertmanager's inhibit rules (`[[alerts.inhibit]]`): while a source alert
fires, the alerts its rule targets are held, as a silence holds them (docs/alerts.md#inhibition).

Held alerts still evaluate and change state; their announcements wait, and when the source
alert stops firing an alert still firing is announced then, and one chat was told fires but
that resolved meanwhile gets its resolve then (`alerts.lifecycle.advance`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alerts.facts import kind_label
from alerts.lifecycle import Alert
from watchdog.core.settings import InhibitRule


def labels_of(alert: Alert, check_kind: str = "") -> dict[str, str]:
    """The labels an alert is matched by: those every receiver sends (alerts.facts)."""
    return {
        "alertname": alert.check_id,
        "severity": alert.severity,
        "source": alert.source,
        "kind": kind_label(alert.check_id, check_kind),
    }


def inhibitions(
    alerts: Mapping[str, Alert], rules: Sequence[InhibitRule], kinds: Mapping[str, str]
) -> dict[str, str]:
    """Check id -> the firing alert (its check id) holding it, for each of `alerts` (one
    source's, as this run leaves them) that a rule holds; `kinds` maps check ids to their
    kind's name."""
    labelled = {c: labels_of(a, kinds.get(c, "")) for c, a in alerts.items()}
    firing = sorted(c for c, a in alerts.items() if a.firing)
    held: dict[str, str] = {}
    for check_id, target in labelled.items():
        by = next(
            (
                source
                for rule in rules
                for source in firing
                if source != check_id and rule.inhibits(labelled[source], target)
            ),
            None,
        )
        if by is not None:
            held[check_id] = by
    return held
