"""The same alert pipeline over ClickHouse's HTTP interface: identical to the embedded engine.

`tests/faults/chserver.py` serves the session's embedded engine over HTTP,
so clickhouse-connect's real HTTP client (bound parameters, Native decoding
of DateTime64, Nullable, Array and LowCardinality) runs every query here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alerts.pipeline import process
from alerts.records import alert_states, check_history, last_runs, outbox_backlog
from alerts.silences import add_silence, list_silences
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H, make_settings, report
from tests.faults.chserver import ClickHouseHTTPServer
from watchdog.core.store import Store, open_store


@pytest.fixture(scope="module")
def http_store(store: Store) -> Iterator[Store]:
    with (
        ClickHouseHTTPServer(store) as server,
        open_store(f"http://default@127.0.0.1:{server.port}/default") as opened,
    ):
        yield opened


def scenario(store: Store) -> dict[str, Any]:
    """Fire, a silence, chat down then up, resolve: everything the tables hold, read back."""
    settings = make_settings()
    chat = RecordingNotifier()
    chat.fail_with("timed out")
    runs = [
        ({"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.NO_DATA}, 0),
        ({"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED}, 4),
        ({"recall_coverage": Status.OK, "observe_coverage": Status.BREACHED}, 8),
    ]
    summaries = []
    for i, (statuses, hours) in enumerate(runs):
        if i == 1:
            add_silence(
                store,
                settings,
                check_id="observe_coverage",
                ends_at=T0 + 6 * H,
                reason="known",
                created_by="ana",
                now=T0,
            )
        if i == 2:
            chat.recover()
        outcome = process(
            store,
            settings,
            report(T0 + hours * H, statuses),
            now=T0 + hours * H,
            notifiers={chat.name: chat},
            timer=FakeTimer(),
        )
        summaries.append(outcome.summary())
    return {
        "summaries": summaries,
        "sent": [m.plain for m in chat.sent],
        "runs": [(r.at, r.status, r.checks) for r in last_runs(store, settings, 10)],
        "states": [
            (
                r.alert.check_id,
                r.alert.state,
                r.alert.since,
                r.alert.fired_at,
                r.alert.last_notified_at,
            )
            for r in alert_states(store, settings)
        ],
        "backlog": outbox_backlog(store, settings, now=T0),
        "history": check_history(store, settings, "recall_coverage", 5),
        "silences": [(s.check_id, s.ends_at, s.created_by) for s in list_silences(store, settings)],
    }


def test_http_store_behaves_like_the_embedded_store(store: Store, http_store: Store) -> None:
    """The pipeline's states, outbox, run log, history and silences read the same on both."""
    embedded = scenario(store)
    over_http = scenario(http_store)
    assert over_http == embedded
    assert len(embedded["sent"]) == 2 and embedded["backlog"][0].delivered == 2
    assert "FIRING observe_coverage" in embedded["sent"][1]  # released by the silence's end
    assert "RESOLVED recall_coverage" in embedded["sent"][1]
