"""Each announcement's facts for the machine receivers (and Telegram), and its stable id.

Built from the same display facts chat shows (`alerts.render.alert_context`), so every receiver
says the same thing in its own format. The alert's key names one firing episode,
`<source>/<check>/<episode start>`: every reminder of an episode and its resolve share it
(PagerDuty deduplicates and then closes the incident by it), and the next episode gets a new
one (docs/alerts.md#what-pagerduty-receives).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime, timedelta

from alerts.base import AlertFacts
from alerts.lifecycle import RUN_CHECK, STORE_CHECK, Kind, Notification
from alerts.render import alert_context
from watchdog.core.links import stamp
from watchdog.core.times import rfc3339

KEY_PREFIX = "memory-watchdog"
MAX_KEY = 255  # PagerDuty's limit for a dedup_key
RESOLVED_CAUSE = "resolved"  # the cause a resolve carries: it no longer fires for anything


def alert_key(source: str, check_id: str, firing_since: datetime | None) -> str:
    """The firing episode's id: readable, at most 255 characters (hashed beyond)."""
    episode = stamp(firing_since) if firing_since is not None else "unknown"
    key = f"{KEY_PREFIX}/{source}/{check_id}/{episode}"
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{KEY_PREFIX}/{digest}/{check_id[:64]}/{episode}"


def alert_facts(n: Notification, link: str = "", check_kind: str = "") -> AlertFacts:
    """One announcement's facts; `link` is the window's page (generator URL), '' when none,
    `check_kind` the name of the check's kind (checks.kinds.KINDS)."""
    context = alert_context(n)
    resolved = n.kind is Kind.RESOLVE
    started = n.firing_since or n.at
    return AlertFacts(
        key=alert_key(n.source, n.check_id, n.firing_since),
        status="resolved" if resolved else "firing",
        kind=n.kind.value,
        source=n.source,
        check_id=n.check_id,
        severity=n.severity.value,
        cause=RESOLVED_CAUSE if resolved else n.cause,
        headline=str(context["headline"]),
        summary=str(context["summary"]),
        value=str(context["value"]),
        target=str(context["target"]),
        starts_at=rfc3339(started),
        ends_at=rfc3339(n.at) if resolved else "",
        at=rfc3339(n.at),
        window_start=rfc3339(n.window.start),
        window_end=rfc3339(n.window.end),
        link=link,
        evidence_kind=str(context["evidence_kind"]),
        evidence=tuple(str(i) for i in context["evidence"]),
        evidence_more=int(context["evidence_more"]),
        check_kind=kind_label(n.check_id, check_kind),
    )


def kind_label(check_id: str, check_kind: str = "") -> str:
    """The `kind` label of an alert: its check's kind, `watchdog` for `store` and `run`."""
    return check_kind or (WATCHDOG_KIND if check_id in (STORE_CHECK, RUN_CHECK) else "")


# The kind of the watchdog's own alerts (`store`, `run`): about itself, not about a check.
WATCHDOG_KIND = "watchdog"
# The kind of an SLO's alerts, `<slo>:page` and `<slo>:ticket` (alerts.slo).
SLO_KIND = "slo_burn"


def identity_labels(alert: AlertFacts) -> dict[str, str]:
    """The alert's identity as Alertmanager labels: `alertname` (the check id), `severity`,
    `source`; an SLO alert's `alertname` is the SLO, with `slo_tier` (page or ticket) and
    `kind` (slo_burn) (docs/slo.md#alerts)."""
    labels = {"alertname": alert.check_id, "severity": alert.severity, "source": alert.source}
    if alert.check_kind == SLO_KIND:
        slo, _, tier = alert.check_id.rpartition(":")
        labels |= {"alertname": slo, "slo_tier": tier, "kind": SLO_KIND}
    return labels


def notify_test_facts(source: str, receiver: str, now: datetime) -> tuple[AlertFacts, AlertFacts]:
    """`notify-test`'s alert: one that fires and resolves at once (severity info)."""
    started = now - timedelta(seconds=1)
    firing = AlertFacts(
        key=f"{KEY_PREFIX}/test/{receiver}/{stamp(now)}",
        status="firing",
        kind=Kind.FIRE.value,
        source=source,
        check_id="notify_test",
        severity="info",
        cause="test",
        headline=f"memory-watchdog test message for {receiver}",
        summary="a test from `memory-watchdog notify-test`; it resolves at once",
        value="—",
        target="—",
        starts_at=rfc3339(started),
        ends_at="",
        at=rfc3339(now),
        window_start=rfc3339(started),
        window_end=rfc3339(now),
        check_kind=WATCHDOG_KIND,
    )
    resolved = replace(firing, status="resolved", kind=Kind.RESOLVE.value, ends_at=rfc3339(now))
    return firing, resolved
