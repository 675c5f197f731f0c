"""One record the store cannot take never holds back another: times the engine reads, loads set aside alone."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.ingest.conftest import Receiving, ingest_settings
from tests.ingest.test_receiver import JSON, T, logs_request, post
from watchdog.core.store import Store
from watchdog.daemon.ingest.otlp import LOGS, PROTOBUF, Batch, decode, to_batch
from watchdog.daemon.ingest.service import REFUSALS_BEFORE_ASIDE, Ingest
from watchdog.daemon.ingest.spool import BATCH_SUFFIX

DAY_NS = 86_400 * 1_000_000_000
NO_TIME = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "x"}]}]}]}


def count(store: Store, table: str, where: str = "1") -> int:
    return int(store.query(f"SELECT count() FROM {table} WHERE {where}").rows[0][0])


def test_a_record_without_a_time_is_stored_at_the_epoch_and_holds_nothing_back(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """OTLP allows a record with no time at all: it is stored at 1970-01-01 (what the exporter
    stores), and the requests after it are loaded in the same round."""
    receiver = receiving()
    assert post(receiver.endpoint, json.dumps(NO_TIME).encode(), content_type=JSON).status == 200
    assert post(receiver.endpoint, logs_request(3)).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 4
    assert count(store, receiver.logs_table, "toUnixTimestamp64Nano(Timestamp) = 0") == 1


def test_times_before_1973_are_stored_to_the_nanosecond(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Records at 0, 1 ns, one second and 1972 keep their exact times (the engine read a short
    text time as something else and refused the whole load)."""
    times = [0, 1, 1_000_000_000, 99_999_999_500_000_000]
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for ns in times:
        scope.log_records.add(time_unix_nano=ns, event_name="old")
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString()).status == 200
    receiver.load()
    stored = store.query(
        f"SELECT toUnixTimestamp64Nano(Timestamp) FROM {receiver.logs_table} ORDER BY Timestamp"
    ).rows
    assert [row[0] for row in stored] == times


def test_a_span_starting_at_zero_is_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """A span whose start (and an event's time) is 0 is stored as sent, with its duration."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    span = scope.spans.add(name="memory.recall", start_time_unix_nano=0, end_time_unix_nano=5)
    span.span_id, span.trace_id = b"\x01" * 8, b"\x02" * 16
    span.events.add(time_unix_nano=0, name="e")
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString(), path="/v1/traces").status == 200
    receiver.load()
    rows = store.query(
        "SELECT toUnixTimestamp64Nano(Timestamp), Duration,"
        f" arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) FROM {receiver.traces_table}"
    ).rows
    assert rows == [(0, 5, [0])]


def test_one_request_over_many_days_is_stored(
    store: Store, receiving: Callable[..., Receiving]
) -> None:
    """Records on 101 different days in one request (one partition each) are stored, not refused
    as too many partitions for one insert."""
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for day in range(101):
        scope.log_records.add(time_unix_nano=T - day * DAY_NS, event_name="daily")
    receiver = receiving()
    assert post(receiver.endpoint, request.SerializeToString()).status == 200
    receiver.load()
    assert count(store, receiver.logs_table) == 101


def test_a_batch_the_store_refuses_is_set_aside_alone_and_holds_nothing_back(
    store: Store, tmp_path: Path
) -> None:
    """A batch the store refuses (a row written by an older version the engine cannot read),
    planned in one load with good ones: the good ones are loaded within a few rounds, every
    later request in the round it is planned, and only the refused batch goes to quarantine."""
    settings = ingest_settings(tmp_path)
    ingest = Ingest(settings, open_fn=lambda request: contextlib.nullcontext(store))
    ingest.round()  # the tables
    batches = tmp_path / "spool" / "batches"
    row = '["0.000000000","","",0,"",0,"",{},"x","","",{},"","","",{}]\n'
    (batches / f"logs-{'0' * 40}{BATCH_SUFFIX}").write_text(row, encoding="utf-8")
    restarted = Ingest(settings, open_fn=lambda request: contextlib.nullcontext(store))
    restarted.spool.put(_batch(logs_request(2)))
    table = settings.ingest.logs_table
    for later in range(2 * REFUSALS_BEFORE_ASIDE):
        restarted.spool.put(_batch(_one_record(T + DAY_NS + later)))  # a later request
        before = count(store, table)
        result = restarted.round()
        assert not result.problem  # the store works: no round is a failed one
        assert count(store, table) > before  # each round loads what came since
    assert sorted(p.name for p in (tmp_path / "spool" / "quarantine").iterdir()) == [
        f"logs-{'0' * 40}{BATCH_SUFFIX}"
    ]
    assert restarted.loaded.set_aside == 1
    assert count(store, table) == 2 + 2 * REFUSALS_BEFORE_ASIDE
    assert restarted.spool.queued_bytes == 0


def _one_record(ns: int) -> bytes:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.add(time_unix_nano=ns, event_name="y")
    return bytes(request.SerializeToString())


def _batch(body: bytes) -> Batch:
    return to_batch(LOGS, decode(LOGS, body, PROTOBUF))


def test_a_batch_moved_back_from_quarantine_is_loaded_without_a_restart(
    store: Store, tmp_path: Path
) -> None:
    """The line of a batch set aside says to move it back to batches/ to load it again: done
    while the daemon runs, the next round loads it, with no restart."""
    settings = ingest_settings(tmp_path)
    ingest = Ingest(settings, open_fn=lambda request: contextlib.nullcontext(store))
    ingest.round()  # the tables
    ingest.spool.put(_batch(logs_request(2)))
    [load] = ingest.spool.plan()
    ingest.spool.set_aside(load, "refused, then the cause was fixed")
    table = settings.ingest.logs_table
    ingest.round()
    assert count(store, table) == 0
    [aside] = (tmp_path / "spool" / "quarantine").iterdir()
    aside.rename(tmp_path / "spool" / "batches" / aside.name)  # what the line says to do
    ingest.round()
    assert count(store, table) == 2
    assert ingest.spool.queued_bytes == 0
