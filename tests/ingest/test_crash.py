"""SIGKILL the daemon in the middle of sustained ingest, many times: nothing acknowledged is lost, nothing doubled."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from tests.ingest.processes import (
    Client,
    Daemon,
    clean_env,
    free_port,
    query,
    unexpected_tracebacks,
)

KILLS = 20
CLIENTS = 3  # over OTLP/HTTP, and as many over OTLP/gRPC
REQUESTS = 1_000_000  # per client: more than any run sends; they send until halted
RECORDS = 100  # per request

pytestmark = pytest.mark.slow


def test_sigkill_during_sustained_ingest_loses_nothing_acknowledged_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """Clients send without pause, over OTLP/HTTP and OTLP/gRPC, each retrying a request until it
    is answered 200 (OK), while the daemon is killed (SIGKILL) and restarted at random moments:
    the table holds every record the clients were told 200 (OK) for, each once."""
    env = clean_env(tmp_path / "xdg")
    config = tmp_path / "watchdog.toml"
    config.write_text('[ingest]\nload_every = "250ms"\n', encoding="utf-8")
    daemon = Daemon(env, free_port(), ("--config", str(config)), grpc_port=free_port())
    daemon.start()
    assert daemon.grpc_port is not None
    clients = [Client(n, daemon.port, REQUESTS, RECORDS) for n in range(CLIENTS)]
    clients += [
        Client(n, daemon.grpc_port, REQUESTS, RECORDS, grpc=True)
        for n in range(CLIENTS, 2 * CLIENTS)
    ]
    deadline = time.monotonic() + 900
    halt = threading.Event()  # set after the last kill: each client stops after its request
    threads = [threading.Thread(target=c.run, args=(deadline, halt), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    rng = random.Random(17)
    kills = 0
    try:
        while kills < KILLS:
            time.sleep(rng.uniform(0.5, 3.0))
            daemon.kill()
            kills += 1
            daemon.start()
        daemon.wait_receiving()  # the last start receives too before the clients halt
        halt.set()
        for thread in threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()))
        assert daemon.stop() == 0, daemon.log()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
    acknowledged = sorted(i for c in clients for i in c.acknowledged)
    # A client stops early only at the deadline, with a request never answered 200.
    assert not any(t.is_alive() for t in threads) and time.monotonic() < deadline
    assert len(acknowledged) > 0 and len(acknowledged) % RECORDS == 0
    assert kills == KILLS and sum(c.cut for c in clients) > 0  # kills cut requests in flight
    assert all(c.acknowledged for c in clients)  # over both transports
    store = f"chdb://{tmp_path / 'xdg' / 'memory-watchdog' / 'store'}"
    stored = [
        row[0] for row in query(store, "SELECT LogAttributes['record.id'] FROM otel.otel_logs", env)
    ]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    assert sorted(stored) == acknowledged, "an acknowledged record is missing"
    assert unexpected_tracebacks(daemon.log()) == []
