"""A real `memory-watchdog daemon --otlp` process, clients that retry until told 200, and store reads.

The daemon runs with its own data directory (its embedded store, its
spool); the test process never opens that store itself (one engine per
process, and the tests' own store is open): `query` reads it from a child.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from tests.process_env import clean_env as clean_env  # also theirs to import

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[2]
T = 1_764_000_000_000_000_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Daemon:
    """`memory-watchdog daemon` receiving on 127.0.0.1:<port> (restartable), and its stderr so far."""

    env: dict[str, str]
    port: int
    args: tuple[str, ...] = ()
    flag: bool = True  # --otlp on the command line; else the config's [ingest] listen
    grpc_port: int | None = None  # --otlp-grpc 127.0.0.1:<grpc_port> too
    lines: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    since: int = 0  # where the latest start's lines begin in `lines`

    def start(self) -> None:
        self.since = len(self.lines)
        otlp = ("--otlp", f"127.0.0.1:{self.port}") if self.flag else ()
        if self.grpc_port is not None:
            otlp += ("--otlp-grpc", f"127.0.0.1:{self.grpc_port}")
        self.proc = subprocess.Popen(
            [str(BIN), "daemon", *otlp, *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=REPO,
        )
        proc = self.proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_receiving(self, seconds: float = 120) -> None:
        """Until the receivers of the latest start listen (their log lines), or AssertionError."""
        self._wait_for("receiving OTLP/HTTP on", seconds)
        if self.grpc_port is not None:
            self._wait_for("receiving OTLP/gRPC on", seconds)

    def wait_started(self, seconds: float = 120) -> None:
        """Until the latest start has its signal handlers (its "daemon started" line)."""
        self._wait_for("daemon started", seconds)

    def _wait_for(self, text: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not any(text in line for line in list(self.lines)[self.since :]):
            assert self.proc is not None and self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, f"never logged {text!r}: " + self.log()
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=60)

    def stop(self) -> int:
        """SIGTERM once the daemon handles it (a SIGTERM during its start kills it), and the exit code."""
        assert self.proc is not None
        self.wait_started()
        self.proc.terminate()
        return self.proc.wait(timeout=180)

    def log(self) -> str:
        return "\n".join(list(self.lines))


def post_logs(port: int, body: bytes) -> int:
    """One OTLP/HTTP logs request (protobuf) to 127.0.0.1:<port>; the status it was answered."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST", "/v1/logs", body=body, headers={"Content-Type": "application/x-protobuf"}
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def records_request(client: int, seq: int, records: int) -> bytes:
    """A logs request whose records each carry a unique `record.id` (client-seq-k)."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    name = resource.resource.attributes.add(key="service.name")
    name.value.string_value = f"client-{client}"
    scope = resource.scope_logs.add()
    for k in range(records):
        record = scope.log_records.add(time_unix_nano=T + seq * records + k)
        record.event_name = "memory.recall.completed"
        attribute = record.attributes.add(key="record.id")
        attribute.value.string_value = f"{client}-{seq}-{k}"
    return bytes(request.SerializeToString())


@dataclass
class Client:
    """Sends `requests` requests one after the other, each retried (the same body) until 200."""

    number: int
    port: int
    requests: int
    records: int
    acknowledged: list[str] = field(default_factory=list)  # record ids the daemon said 200 to
    attempts: int = 0
    refusals: dict[int, int] = field(default_factory=dict)  # 429/503 answers seen
    cut: int = 0  # requests that got no answer (the daemon died)
    cuts: dict[str, int] = field(default_factory=dict)  # why, by exception
    grpc: bool = False  # send over OTLP/gRPC (LogsService/Export) to `port`
    _channel: Any = None

    def run(self, deadline: float, halt: threading.Event | None = None) -> None:
        """Send until done, until `deadline` (monotonic), or between requests once `halt` is set."""
        for seq in range(self.requests):
            if halt is not None and halt.is_set():
                return
            body = records_request(self.number, seq, self.records)
            while not self._send(body):
                if time.monotonic() > deadline:
                    return
                time.sleep(random.uniform(0.05, 0.2))
            self.acknowledged.extend(f"{self.number}-{seq}-{k}" for k in range(self.records))

    def _send(self, body: bytes) -> bool:
        if self.grpc:
            return self._send_grpc(body)
        self.attempts += 1
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(
                "POST", "/v1/logs", body=body, headers={"Content-Type": "application/x-protobuf"}
            )
            response = connection.getresponse()
            response.read()
        except OSError as exc:
            self.cut += 1
            self.cuts[type(exc).__name__] = self.cuts.get(type(exc).__name__, 0) + 1
            return False
        finally:
            connection.close()
        if response.status != 200:
            self.refusals[response.status] = self.refusals.get(response.status, 0) + 1
        return response.status == 200

    def _send_grpc(self, body: bytes) -> bool:
        """One Export call: True when answered OK; a refusal or a cut call is tried again."""
        self.attempts += 1
        if self._channel is None:
            # Reconnect fast after a kill: the default backoff grows to minutes.
            self._channel = grpc.insecure_channel(
                f"127.0.0.1:{self.port}",
                options=[
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 500),
                ],
            )
        export = LogsServiceStub(self._channel).Export
        try:
            export(ExportLogsServiceRequest.FromString(body), timeout=30)
        except grpc.RpcError as error:
            code = error.code()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE) and (
                dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")  # type: ignore[attr-defined]
            ):
                self.refusals[code.value[0]] = self.refusals.get(code.value[0], 0) + 1
            else:
                self.cut += 1
                self.cuts[code.name] = self.cuts.get(code.name, 0) + 1
            return False
        return True


QUERY = """
import json, sys
from watchdog.core.store import open_store
with open_store(sys.argv[1]) as store:
    rows = store.query(sys.argv[2]).rows
print(json.dumps([list(r) for r in rows], default=str))
"""


def query(store_url: str, sql: str, env: dict[str, str]) -> list[list[Any]]:
    """Rows of `sql` on the embedded store at `store_url`, read by a child process."""
    done = subprocess.run(
        [sys.executable, "-c", QUERY, store_url, sql],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=REPO,
        check=True,
    )
    rows: list[list[Any]] = json.loads(done.stdout)
    return rows


def unexpected_tracebacks(log: str) -> list[str]:
    """The log's tracebacks, but those a SIGKILL of the daemon leaves behind it: an orphaned
    tick's (a run process that finishes and finds its parent gone: BrokenPipeError in
    watchdog/daemon/child.py), and an unborn child's (see `_unborn`)."""
    found = []
    for block in log.split("Traceback (most recent call last):")[1:]:
        lines = block.splitlines()
        error = next((line for line in lines[1:] if line and not line.startswith(" ")), "")
        orphan = error.startswith("BrokenPipeError") and "daemon/child.py" in block
        if not (orphan or _unborn(block, error)):
            found.append("\n".join(lines[:12]))
    return found


# What pickle.load says of a pipe closed before the process object was written, or part-way.
_UNBORN_ERRORS = (
    "EOFError: Ran out of input",
    "_pickle.UnpicklingError: pickle data was truncated",
)


def _unborn(block: str, error: str) -> bool:
    """Whether a traceback is the one a process forked by multiprocessing's forkserver prints
    when the process that asked for it was SIGKILLed before it sent what the child is to run.

    The daemon starts each tick and each load round from the forkserver: it connects, the
    forkserver forks the child at once, and the child reads its process object (pickled) from
    the daemon, which writes it right after connecting. Killed between the two, or while it
    writes, the daemon never writes it whole: the child's pickle.load in
    multiprocessing.spawn._main meets the end of the pipe (EOFError, or UnpicklingError for a
    part written), and the forkserver's child prints it, on the stderr it shares with the
    daemon, before it exits. Nothing had started, so nothing is lost. A living daemon cannot
    give it: it pickles the object before it connects, writes it whole right after, and keeps
    a duplicate of the pipe's write end as long as the child's handle lives, so the child meets
    the end of the pipe with nothing read only once the daemon's process is gone
    (multiprocessing.popen_forkserver.Popen._launch; reproduced by
    tests/ingest/test_crash.py::test_a_child_forked_as_its_daemon_is_killed_is_the_only_eoferror_ignored).
    """
    return (
        error in _UNBORN_ERRORS
        and "multiprocessing/forkserver.py" in block
        and "in _serve_one" in block
        and "multiprocessing/spawn.py" in block
        and "in _main" in block
        and "reduction.pickle.load(from_parent)" in block
    )


def rss_kib(pid: int) -> int:
    """The resident set of a process, KiB (/proc/<pid>/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
