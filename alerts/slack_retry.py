"""slack-sdk's retry handlers bounded by the run's `Deadline`: rate limits honouring
Retry-After, 5xx and connection errors with backoff, each wait paced through the deadline by the
rules of `alerts.receivers.http`. Apart from `alerts.receivers.slack`, which imports it only
when a message goes out, so that a run that sends nothing never loads slack-sdk
(docs/alerts.md#delivery).
"""

from __future__ import annotations

import random
from http.client import HTTPException, RemoteDisconnected
from typing import Any
from urllib.error import URLError

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.jitter import Jitter

from alerts.base import Deadline
from alerts.receivers.http import backoff_limit, retry_after


class _ProportionalJitter(Jitter):
    """Up to half the interval again, so small test bases stay small."""

    def recalculate(self, duration: float) -> float:
        return float(duration + random.uniform(0, duration / 2))


class RateLimitRetry(RateLimitErrorRetryHandler):
    """429: wait exactly Retry-After when the deadline leaves room for it, else give up."""

    def __init__(self, deadline: Deadline, max_retry_count: int) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        if response is None or response.status_code != 429:
            return False
        wait = retry_after(response.headers)
        return self.deadline.allows(1.0 if wait is None else wait)

    def prepare_for_next_attempt(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> None:
        state.next_attempt_requested = True
        wait = retry_after(response.headers if response is not None else None)
        self.deadline.sleep(1.0 if wait is None else wait)
        state.increment_current_attempt()


class _Backoff:
    """Exponential backoff with jitter, paced through the deadline."""

    deadline: Deadline
    interval_calculator: Any

    def _wait(self, state: Any) -> float:
        return float(self.interval_calculator.calculate_sleep_duration(state.current_attempt))

    def prepare_for_next_attempt(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> None:
        state.next_attempt_requested = True
        self.deadline.sleep(self._wait(state))
        state.increment_current_attempt()


class ServerErrorRetry(_Backoff, ServerErrorRetryHandler):
    """Any 5xx, with backoff, while the deadline allows."""

    def __init__(self, deadline: Deadline, max_retry_count: int, backoff_base: float) -> None:
        ServerErrorRetryHandler.__init__(
            self,
            max_retry_count=max_retry_count,
            interval_calculator=BackoffRetryIntervalCalculator(
                backoff_factor=backoff_base, jitter=_ProportionalJitter()
            ),
        )
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        return (
            response is not None
            and response.status_code >= 500
            and self.deadline.allows(backoff_bound(self.interval_calculator, state))
        )


class ConnectionRetry(_Backoff, ConnectionErrorRetryHandler):
    """Refused, reset, dropped or timed-out connections, with backoff, while the deadline allows."""

    def __init__(self, deadline: Deadline, max_retry_count: int, backoff_base: float) -> None:
        ConnectionErrorRetryHandler.__init__(
            self,
            max_retry_count=max_retry_count,
            interval_calculator=BackoffRetryIntervalCalculator(
                backoff_factor=backoff_base, jitter=_ProportionalJitter()
            ),
            error_types=[
                URLError,
                ConnectionError,
                RemoteDisconnected,
                TimeoutError,
                HTTPException,
            ],
        )
        self.deadline = deadline

    def _can_retry(
        self, *, state: Any, request: Any, response: Any = None, error: Any = None
    ) -> bool:
        return bool(
            super()._can_retry(state=state, request=request, response=response, error=error)
        ) and self.deadline.allows(backoff_bound(self.interval_calculator, state))


def backoff_bound(calculator: Any, state: Any) -> float:
    """The longest the next backoff may take (base * 2^attempt, plus half for jitter)."""
    return backoff_limit(float(calculator.backoff_factor), int(state.current_attempt))
