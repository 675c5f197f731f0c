"""Fixtures for the OTLP receiver: a receiver on 127.0.0.1 loading into the shared test store."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store
from watchdog.daemon.ingest.otlp_grpc import TURN_GRACE
from watchdog.daemon.ingest.service import Ingest
from watchdog.runner.plugins import PLUGINS


@dataclass
class Receiving:
    """A receiver started on 127.0.0.1: where to send, and where the rows land."""

    ingest: Ingest
    settings: Settings
    endpoint: str  # http://127.0.0.1:<port>
    grpc_target: str = ""  # 127.0.0.1:<port> when started with grpc=True

    @property
    def logs_table(self) -> str:
        return self.settings.ingest.logs_table

    @property
    def traces_table(self) -> str:
        return self.settings.ingest.traces_table

    def load(self) -> None:
        """Load what was accepted into the store now (the daemon's loader does it every 2s)."""
        result = self.ingest.round()
        assert not result.problem, result.problem


def ingest_settings(tmp_path: Path, **ingest: Any) -> Settings:
    """Settings whose receiver writes tables of its own and keeps its spool under tmp_path."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    data: dict[str, Any] = {
        "logs_table": f"{database}.otel_logs",
        "traces_table": f"{database}.otel_traces",
        "spool_dir": str(tmp_path / "spool"),
        **ingest,
    }
    return settings_from_mapping({"ingest": data}, plugins=PLUGINS, env={"HOME": str(tmp_path)})


@pytest.fixture
def receiving(store: Store, tmp_path: Path) -> Iterator[Callable[..., Receiving]]:
    """Start receivers (keyword arguments are [ingest] keys; `grpc=True` serves OTLP/gRPC too,
    `grpc_max_receive` its bound from a call's headers to its message, `grpc_turn_grace` how long
    a call holds its turn without its message); each stops at the end of the test."""
    started: list[Ingest] = []

    def start(
        *,
        grpc: bool = False,
        grpc_max_receive: float = 30.0,
        grpc_turn_grace: float = TURN_GRACE,
        **ingest: Any,
    ) -> Receiving:
        settings = ingest_settings(tmp_path / uuid.uuid4().hex[:8], **ingest)
        receiver = Ingest(
            settings,
            open_fn=lambda request: contextlib.nullcontext(store),
            grpc_max_receive=grpc_max_receive,
            grpc_turn_grace=grpc_turn_grace,
        )
        server = receiver.start("127.0.0.1:0", "127.0.0.1:0" if grpc else None)
        started.append(receiver)
        assert server.http is not None
        host, port = server.http
        target = f"{server.grpc[0]}:{server.grpc[1]}" if server.grpc is not None else ""
        return Receiving(receiver, settings, f"http://{host!s}:{port}", target)

    yield start
    for receiver in started:
        receiver.stop()
