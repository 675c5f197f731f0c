"""The receiver's loads on a server store whose INSERT answers are lost or late: stored once, never set aside.

The store is the tests' ClickHouse HTTP harness behind a proxy that forwards
each INSERT, lets the server commit it, and keeps the answer from the loader
(tests/faults/insert_proxy.py): the outcome is uncertain, and the load is
tried again whole under its own deduplication token, as after a crash.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.insert_proxy import InsertAnswerProxy
from tests.ingest.test_receiver import logs_request
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.ingest.otlp import LOGS, PROTOBUF
from watchdog.daemon.ingest.service import REFUSALS_BEFORE_ASIDE, Ingest
from watchdog.runner.plugins import PLUGINS

REQUESTS = 5


@pytest.fixture
def proxy(ch_server: ClickHouseHTTPServer) -> Iterator[InsertAnswerProxy]:
    with InsertAnswerProxy(ch_server.port) as opened:
        yield opened


def settings_through(proxy: InsertAnswerProxy, tmp_path: Path, **store: Any) -> Settings:
    """A receiver loading into tables of its own on the harness, through `proxy`."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    return settings_from_mapping(
        {
            "store": {"url": f"http://default:secret@127.0.0.1:{proxy.port}/default", **store},
            "ingest": {
                "logs_table": f"{database}.otel_logs",
                "traces_table": f"{database}.otel_traces",
                "spool_dir": str(tmp_path / "spool"),
            },
        },
        plugins=PLUGINS,
        env={"HOME": str(tmp_path)},
    )


def accept_requests(ingest: Ingest, count: int) -> None:
    """`count` requests acknowledged (durable in the spool), as the HTTP or gRPC answer would."""
    for i in range(count):
        request = ExportLogsServiceRequest.FromString(logs_request(1 + i))
        for record in request.resource_logs[0].scope_logs[0].log_records:
            record.body.string_value += f" of request {i}"  # each request its own records
        ingest.receiver.accept(LOGS, request.SerializeToString(), PROTOBUF)


def stored(store: Store, table: str) -> tuple[int, int]:
    """(rows, distinct rows) in `table`."""
    row = store.query(f"SELECT count(), uniqExact(Timestamp, Body) FROM {table}").rows[0]
    return int(row[0]), int(row[1])


def drain(ingest: Ingest, rounds: int = 5) -> None:
    for _ in range(rounds):
        ingest.round()
        if not ingest.spool.queued_bytes:
            return


@pytest.mark.parametrize("drop", ["lose", "stall"])
def test_an_insert_whose_answer_is_lost_is_retried_under_its_own_token(
    store: Store, proxy: InsertAnswerProxy, tmp_path: Path, drop: str
) -> None:
    """Five acknowledged requests in one load; the server commits the insert and its answer is
    lost (`lose`) or never comes before the timeout (`stall`): the load is not "refused", it is
    tried again whole under its own token, and every row is stored exactly once."""
    settings = settings_through(proxy, tmp_path, query_timeout="2s")
    ingest = Ingest(settings)
    ingest.round()  # the tables, with the answers passing
    accept_requests(ingest, REQUESTS)
    proxy.drop = drop
    for _ in range(2):  # the answer lost twice in a row
        result = ingest.round()
        assert result.problem or any(not o.loaded for o in result.outcomes)
    assert proxy.dropped >= 2
    proxy.drop = None
    drain(ingest)
    assert ingest.spool.queued_bytes == 0
    total = sum(range(1, REQUESTS + 1))
    assert stored(store, settings.ingest.logs_table) == (total, total)
    assert ingest.loaded.set_aside == 0


def test_a_store_that_times_out_sets_nothing_aside(
    store: Store, proxy: InsertAnswerProxy, tmp_path: Path
) -> None:
    """An insert that times out more than REFUSALS_BEFORE_ASIDE rounds in a row (the server took
    it, the answer came too late) is no refusal: nothing goes to quarantine/, and once the store
    answers in time every acknowledged row is stored, once."""
    settings = settings_through(proxy, tmp_path, query_timeout="1s")
    ingest = Ingest(settings)
    ingest.round()
    accept_requests(ingest, 2)
    proxy.drop = "stall"
    for _ in range(REFUSALS_BEFORE_ASIDE + 1):
        ingest.round()
    proxy.drop = None
    quarantine = tmp_path / "spool" / "quarantine"
    assert not quarantine.exists() or not any(quarantine.iterdir())
    drain(ingest)
    assert stored(store, settings.ingest.logs_table) == (3, 3)
    assert ingest.loaded.set_aside == 0
