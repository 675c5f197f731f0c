"""Fixtures for alerting: a Slack stand-in, settings with a database of their own, reports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alerts.notifiers import SlackNotifier
from alerts.testing import FakeTimer
from checks.base import CheckResult, Comparison, Report, Severity, Status, Window
from checks.evidence import Evidence
from tests.alerts.http_standin import WebhookStandIn
from tests.alerts.slack_standin import TOKEN, SlackStandIn
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.runner.plugins import PLUGINS

T0 = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
H = timedelta(hours=1)
SOURCE = "joelclaw.otel_events"


@pytest.fixture
def hook() -> Iterator[WebhookStandIn]:
    """A webhook consumer on 127.0.0.1 (Alertmanager's notifications, the webhook receiver's)."""
    standin = WebhookStandIn()
    yield standin
    standin.close()


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


def make_settings(
    config: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Settings whose watchdog database is unique to the test (the store is shared); `env` is
    what its `${NAME}` references read (none by default)."""
    data: dict[str, Any] = {
        k: dict(v) if isinstance(v, dict) else v for k, v in (config or {}).items()
    }
    data.setdefault("store", {})["database"] = f"wd_{uuid.uuid4().hex[:12]}"
    data.setdefault("source", {}).setdefault("table", SOURCE)
    return settings_from_mapping(data, plugins=PLUGINS, env=dict(env or {}))


@pytest.fixture
def settings() -> Settings:
    return make_settings()


@pytest.fixture
def timer() -> FakeTimer:
    return FakeTimer()


def webhook_notifier(slack: SlackStandIn, **options: Any) -> SlackNotifier:
    """The real Slack notifier against the stand-in, with fast retries."""
    options.setdefault("backoff_base", 0.01)
    options.setdefault("timeout_s", 2.0)
    return SlackNotifier(webhook_url=slack.webhook_url, **options)


def api_notifier(slack: SlackStandIn, **options: Any) -> SlackNotifier:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("timeout_s", 2.0)
    return SlackNotifier(token=TOKEN, channel="#memory-alerts", base_url=slack.api_url, **options)


_DEFAULTS: dict[str, tuple[Severity, str, Comparison, float]] = {
    "recall_coverage": (Severity.CRITICAL, "count", Comparison.GT, 0),
    "observe_coverage": (Severity.CRITICAL, "count", Comparison.GT, 0),
    "recall_latency_p95": (Severity.WARNING, "ms", Comparison.GE, 3000),
    "write_gate_drift": (Severity.WARNING, "ratio", Comparison.GE, 0.7),
}


def result(check_id: str, status: Status, value: float | None = None, **fields: Any) -> CheckResult:
    """A check result as the engine would report it (value defaults by status)."""
    severity, unit, comparison, target = _DEFAULTS.get(
        check_id, (Severity.CRITICAL, "count", Comparison.GT, 0)
    )
    if value is None and status is Status.BREACHED:
        value = 3.0 if unit == "count" else target * 1.5
    if value is None and status is Status.OK:
        value = 0.0 if unit == "count" else target / 2
    summaries = {
        Status.BREACHED: f"{check_id} breached with {value}",
        Status.OK: f"{check_id} within target",
        Status.ERROR: "could not evaluate: query timed out (raise store.query_timeout)",
        Status.NO_DATA: "nothing to judge in the window",
        Status.INSUFFICIENT_DATA: "too few samples",
        Status.DISABLED: "disabled in config",
    }
    breached_count = status is Status.BREACHED and unit == "count"
    evidence = Evidence(sessions=("s-1", "s-2", "s-3")) if breached_count else Evidence()
    base: dict[str, Any] = {
        "value": value if status not in (Status.ERROR, Status.NO_DATA, Status.DISABLED) else None,
        "target": target,
        "severity": severity,
        "sample_size": 0 if status is Status.NO_DATA else 40,
        "summary": summaries[status],
        "evidence": evidence,
        "comparison": comparison,
        "unit": unit,
    }
    base.update(fields)
    return CheckResult(id=check_id, status=status, **base)


def report(
    at: datetime, statuses: Mapping[str, Status | CheckResult], source: str = SOURCE
) -> Report:
    """A report at `at` (window 4h) with one result per check id."""
    window = Window(at=at, length=4 * H, lookback=24 * H)
    checks = {
        check_id: s if isinstance(s, CheckResult) else result(check_id, s)
        for check_id, s in statuses.items()
    }
    return Report(window=window, source=source, checks=checks)
