"""What OTLP/gRPC calls of large messages cost a real daemon: bounded, with or without a token.

grpcio buffered each message whole before the handler could check the token
or take the decode budget: 40 calls at once of one 15 MiB record with a
wrong token took the daemon to 641 MiB, 500 MiB after; 48 on a daemon
without a token, to 902 MiB (issue 32, finding 5). A real `daemon
--otlp-grpc` process is sent them; its VmRSS is read from /proc every 50 ms.
The bounds are generous (a shared machine): what they catch is the messages
being held, 15 MiB apiece. docs/performance.md#the-receiver-under-abuse has
the measured figures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from tests.builder import T0, M, Scenario
from tests.ingest.processes import Daemon, clean_env, free_port, rss_kib
from tests.ingest.sdk import send_logs_grpc

pytestmark = pytest.mark.slow

TOKEN = "s3cret-token"
MiB = 1024 * 1024


def large_request() -> ExportLogsServiceRequest:
    """One log record whose body is 15 MiB."""
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add(time_unix_nano=1)
    record.body.string_value = "x" * (15 * MiB)
    return request


@contextmanager
def daemon(tmp_path: Path, token: bool) -> Iterator[Daemon]:
    config = tmp_path / "watchdog.toml"
    config.write_text("[ingest]\n" + (f'token = "{TOKEN}"\n' if token else ""), encoding="utf-8")
    running = Daemon(
        clean_env(tmp_path / "xdg"), free_port(), ("--config", str(config)), grpc_port=free_port()
    )
    running.start()
    try:
        running.wait_receiving()
        yield running
    finally:
        running.stop()


class Peak:
    """The most VmRSS a process had while the block ran, sampled every 50 ms, KiB."""

    def __init__(self, pid: int) -> None:
        self.pid, self.kib, self._stop = pid, rss_kib(pid), threading.Event()

    def __enter__(self) -> Peak:
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.kib = max(self.kib, rss_kib(self.pid))
            time.sleep(0.05)


def burst(target: str, calls: int, metadata: Any) -> list[str]:
    """`calls` Export calls of the large request at once, each on its own connection; the
    status names they ended with."""
    request, ended = large_request(), list[str]()

    def one() -> None:
        options = [("grpc.max_send_message_length", 32 * MiB)]
        with grpc.insecure_channel(target, options=options) as channel:
            try:
                LogsServiceStub(channel).Export(request, metadata=metadata, timeout=120)
                ended.append("OK")
            except grpc.RpcError as error:
                ended.append(error.code().name)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ended


def events() -> Scenario:
    scenario = Scenario()
    scenario.session("s1").starts(T0).recalls(T0 + M)
    return scenario


def test_forty_large_messages_with_a_wrong_token_cost_the_daemon_nothing(tmp_path: Path) -> None:
    """40 calls at once of one 15 MiB record with a wrong token: each UNAUTHENTICATED, the
    daemon's VmRSS grows by less than 64 MiB (before: by 240 MiB, 600 MiB of messages read),
    and the SDK exporter with the token is answered after."""
    with daemon(tmp_path, token=True) as running:
        assert running.proc is not None
        target = f"127.0.0.1:{running.grpc_port}"
        time.sleep(1.0)  # settled after start
        with Peak(running.proc.pid) as peak:
            before = rss_kib(running.proc.pid)
            ended = burst(target, 40, (("authorization", "Bearer wrong"),))
        assert set(ended) == {"UNAUTHENTICATED"}
        assert (peak.kib - before) / 1024 < 64, (before, peak.kib)
        assert send_logs_grpc(target, events(), authorization=f"Bearer {TOKEN}")


def test_forty_eight_large_messages_without_a_token_are_held_a_few_at_a_time(
    tmp_path: Path,
) -> None:
    """A loopback daemon without a token, 48 calls at once of one 15 MiB record: a few are
    received and decoded at a time, the others told to come back (RESOURCE_EXHAUSTED with
    RetryInfo, tests/ingest/test_grpc_strangers.py);
    VmRSS grows by less than 400 MiB (before: by 780 MiB, and stayed there)."""
    with daemon(tmp_path, token=False) as running:
        assert running.proc is not None
        target = f"127.0.0.1:{running.grpc_port}"
        time.sleep(1.0)
        with Peak(running.proc.pid) as peak:
            before = rss_kib(running.proc.pid)
            ended = burst(target, 48, ())
        assert set(ended) <= {"OK", "RESOURCE_EXHAUSTED"} and "OK" in ended, ended
        assert (peak.kib - before) / 1024 < 400, (before, peak.kib)
        assert send_logs_grpc(target, events())
