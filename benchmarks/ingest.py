"""`python -m benchmarks.ingest`: sustained OTLP ingest into a real daemon, its evaluations alongside.

A `memory-watchdog daemon --otlp --http` runs with a data directory of its
own, its source the `otel_logs` preset on the table it fills, and a run
every `--every` (each takes the store's turn from the loader, as in
production). Client processes send, over keep-alive connections, protobuf
requests of `--records` records each, as an SDK exporter does (it sends 512):

- logs: the demo's memory events (recall, observe, compaction, session
  end, deviations) as log records, their attributes with their own types;
- spans: memory operations as spans (ids, kind, status, attributes).

Every request is new: its records' timestamps are rewritten in place (the
fixed64 fields of the serialised template), so no request is a retry of
another. Each phase (logs, then spans) lasts its seconds; rates come from
the daemon's own counters on /metrics, sampled every second: records
accepted (durable: answered 200) and loaded (in the store) per second,
medians over `INTERVAL`-second intervals after a warm-up, and the phase's
overall rate. The daemon's RSS (/proc/<pid>/status) is sampled every second
from the receiver's start to the end: start, peak, end.

    python -m benchmarks.ingest                       # logs 120s, spans 45s (`make bench`)
    python -m benchmarks.ingest --logs-seconds 30 --spans-seconds 15
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from benchmarks.report import machine
from watchdog.demo.data import generate_demo
from watchdog.demo.model import Event
from watchdog.demo.otlp import session_of

# phase -> the receiver's signal label; logs_grpc: the logs again, over OTLP/gRPC
SIGNALS = {"logs": "logs", "spans": "traces", "logs_grpc": "logs"}
GRPC_LOGS = "grpc:/opentelemetry.proto.collector.logs.v1.LogsService/Export"
RESULTS = Path(__file__).with_name("results.json")
GOAL_LOGS_PER_S = 20_000
INTERVAL = 10  # seconds per rate sample
WARMUP = 10  # seconds of each phase left out of the medians
SENTINEL = 0x5EED_0000_0000_0000  # template timestamps: distinctive 8-byte patterns
SEVERITY = {"debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}

CONFIG = """
[source]
preset = "otel_logs"
table = "otel.otel_logs"

[schedule]
every = "{every}"
delay = "0s"

[store]
lock_timeout = "60s"
"""


# -- requests ---------------------------------------------------------------------------------


def _value(value: Any) -> AnyValue:
    """A metadata value as an OTLP AnyValue of its own type (lists as arrays, the rest as text)."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_value(v) for v in value)
        return out
    return AnyValue(string_value=json.dumps(value, separators=(",", ":")))


def _attributes(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in values.items() if v is not None]


def logs_template(records: int) -> tuple[bytes, list[int]]:
    """A logs request of `records` demo events (one resource per source) and its timestamps' offsets."""
    events = generate_demo(sessions=100, seed=1, at=datetime.now(UTC)).events[:records]
    request = ExportLogsServiceRequest()
    by_source: dict[str, Any] = {}
    for n, event in enumerate(events):
        if event.source not in by_source:
            resource = request.resource_logs.add()
            resource.resource.attributes.extend(_attributes({"service.name": event.source}))
            by_source[event.source] = resource.scope_logs.add(scope={"name": "memory"})
        record = by_source[event.source].log_records.add()
        record.time_unix_nano = SENTINEL + 2 * n
        record.observed_time_unix_nano = SENTINEL + 2 * n + 1
        record.severity_number = SEVERITY.get(event.level, 9)  # type: ignore[assignment]
        record.severity_text = event.level.upper()
        record.body.string_value = event.action
        record.event_name = event.action
        record.attributes.extend(_attributes(_log_attributes(event)))
    return _with_offsets(bytes(request.SerializeToString()), 2 * len(events))


def _log_attributes(event: Event) -> dict[str, Any]:
    attributes = dict(event.metadata)
    attributes["session.id"] = session_of(event)
    attributes["event.id"] = event.id
    if event.duration_ms is not None:
        attributes["duration_ms"] = event.duration_ms
    return attributes


def spans_template(records: int) -> tuple[bytes, list[int]]:
    """A traces request of `records` memory operations as spans, and its timestamps' offsets."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.extend(_attributes({"service.name": "agent"}))
    scope = resource.scope_spans.add(scope={"name": "memory"})
    names = ("memory.recall", "memory.observe", "memory.compaction", "memory.session")
    for n in range(records):
        span = scope.spans.add()
        span.trace_id = os.urandom(16)
        span.span_id = os.urandom(8)
        span.name = names[n % len(names)]
        span.kind = Span.SPAN_KIND_INTERNAL
        span.start_time_unix_nano = SENTINEL + 2 * n
        span.end_time_unix_nano = SENTINEL + 2 * n + 1
        span.status.code = Status.STATUS_CODE_ERROR if n % 50 == 0 else Status.STATUS_CODE_OK
        span.attributes.extend(
            _attributes({"session.id": f"s-{n % 40}", "result_count": n % 7, "query": "prefs"})
        )
    return _with_offsets(bytes(request.SerializeToString()), 2 * records)


def _with_offsets(body: bytes, count: int) -> tuple[bytes, list[int]]:
    offsets = [body.find(struct.pack("<Q", SENTINEL + i)) for i in range(count)]
    assert all(o >= 0 for o in offsets) and len(set(offsets)) == count
    return body, offsets


# -- the daemon and its counters --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_METRIC = re.compile(r"^(memory_watchdog_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$")


def scrape(port: int) -> dict[str, float]:
    """The daemon's /metrics, `name{labels}` -> value."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = {}
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match:
            found[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return found


def rss_mib(pid: int) -> float:
    """The resident set of a process, MiB (/proc/<pid>/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, *, reaped: bool = False) -> float:
    """The CPU seconds (user + system) of a process; with `reaped`, of the children it waited for too."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS


def children_cpu_s(pid: int) -> float:
    """The CPU seconds of a process's children and what they reaped: the daemon's forkserver runs
    the loads and the evaluations, each in a child of its own that it waits for."""
    total = cpu_s(pid, reaped=True) - cpu_s(pid)
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            total += cpu_s(int(child), reaped=True)
        except OSError:  # gone since: its time is in ours once reaped
            continue
    return total


@dataclass
class Sample:
    t: float  # epoch seconds
    rss_mib: float
    cpu_s: float  # the daemon's own, so far
    children_cpu_s: float  # its loads' and evaluations' (in children), so far
    metrics: dict[str, float]

    def count(self, signal: str, outcome: str) -> float:
        key = f'memory_watchdog_ingest_records_total{{outcome="{outcome}",signal="{signal}"}}'
        return self.metrics.get(key, 0.0)

    @property
    def rounds(self) -> float:
        return sum(
            v
            for k, v in self.metrics.items()
            if k.startswith("memory_watchdog_ingest_load_rounds_total")
        )

    @property
    def runs(self) -> float:
        return sum(v for k, v in self.metrics.items() if k.startswith("memory_watchdog_runs_total"))


@dataclass
class Watcher:
    """Samples the daemon's counters, RSS and CPU every second, in a thread."""

    pid: int
    port: int
    directory: Path
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(1.0 - (time.monotonic() - started) % 1.0):
            try:
                metrics = scrape(self.port)
                pid = self.pid
                sample = Sample(time.time(), rss_mib(pid), cpu_s(pid), children_cpu_s(pid), metrics)
            except OSError:
                continue
            self.samples.append(sample)


def start_daemon(
    directory: Path, every: str
) -> tuple[subprocess.Popen[bytes], int, int, int, Path]:
    """The daemon in a fresh data directory; (process, OTLP/HTTP port, OTLP/gRPC port, its own
    HTTP port, log file)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    config = directory / "watchdog.toml"
    config.write_text(CONFIG.format(every=every), encoding="utf-8")
    otlp, grpc, web = _free_port(), _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_"))}
    env["XDG_DATA_HOME"] = str(directory / "xdg")
    log = directory / "daemon.log"
    command = [str(Path(sys.executable).with_name("memory-watchdog")), "daemon"]
    command += ["--config", str(config), "--otlp", f"127.0.0.1:{otlp}"]
    command += ["--otlp-grpc", f"127.0.0.1:{grpc}"]
    command += ["--http", f"127.0.0.1:{web}"]
    with log.open("wb") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
    deadline = time.monotonic() + 120
    while b"receiving OTLP/HTTP on" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the daemon did not start:\n" + log.read_text(errors="replace"))
        time.sleep(0.1)
    return proc, otlp, grpc, web, log


# -- phases -----------------------------------------------------------------------------------


def run_phase(
    phase: str, seconds: float, clients: int, records: int, ports: tuple[int, int], watcher: Watcher
) -> dict[str, Any]:
    """Send one phase for `seconds` from `clients` processes; its rates from the daemon's counters.

    `ports`: OTLP/HTTP's and OTLP/gRPC's (the logs_grpc phase).
    """
    signal = SIGNALS[phase]
    if phase == "logs_grpc":
        path, port = GRPC_LOGS, ports[1]
    else:
        path, port = ("/v1/logs" if signal == "logs" else "/v1/traces"), ports[0]
    body, offsets = (logs_template if signal == "logs" else spans_template)(records)
    template = watcher.directory / f"{phase}.pb"
    template.write_bytes(body)
    Path(f"{template}.offsets").write_text(json.dumps(offsets))
    loaded_before = watcher.samples[-1].count(signal, "loaded") if watcher.samples else 0.0
    started = time.time() + 5  # every client has started and waits for it
    ended = started + seconds
    command = [sys.executable, "-m", "benchmarks.ingest_client", str(port), path, str(template)]
    procs = [
        subprocess.Popen(
            [*command, str(n), str(started), str(ended)], stdout=subprocess.PIPE, text=True
        )
        for n in range(clients)
    ]
    told = [json.loads(proc.communicate(timeout=seconds + 300)[0]) for proc in procs]
    accepted = sum(t["requests"] for t in told) * records
    drained = _drain(watcher, signal, loaded_before + accepted, time.time())
    samples = [s for s in watcher.samples if started <= s.t <= ended]
    return _rates(signal, samples, started, ended, records, told, drained)


def _drain(watcher: Watcher, signal: str, loaded: float, since: float) -> float:
    """Seconds until `loaded` records of `signal` are in the store (at most 300)."""
    while time.time() < since + 300:
        if watcher.samples and watcher.samples[-1].count(signal, "loaded") >= loaded:
            break
        time.sleep(0.5)
    return time.time() - since


def _per_interval(samples: list[Sample], signal: str, outcome: str, start: float) -> list[float]:
    """Records per second over consecutive INTERVAL-second intervals from `start`."""
    steady = [s for s in samples if s.t >= start]
    rates = []
    i = 0
    for j, sample in enumerate(steady):
        if sample.t - steady[i].t >= INTERVAL:
            done = sample.count(signal, outcome) - steady[i].count(signal, outcome)
            rates.append(done / (sample.t - steady[i].t))
            i = j
    return rates


def _rates(
    signal: str,
    phase: list[Sample],
    started: float,
    ended: float,
    records: int,
    told: list[dict[str, int]],
    drained: float,
) -> dict[str, Any]:
    accepted = _per_interval(phase, signal, "accepted", started + WARMUP)
    loaded = _per_interval(phase, signal, "loaded", started + WARMUP)
    first, last = phase[0], phase[-1]
    span = last.t - first.t
    accepted_n = max(1.0, last.count(signal, "accepted") - first.count(signal, "accepted"))
    return {
        "seconds": round(ended - started, 1),
        "records_per_request": records,
        "requests_answered_200": sum(t["requests"] for t in told),
        "requests_refused_429_503": sum(t["refused"] for t in told),
        "accepted_per_s_median": round(statistics.median(accepted)) if accepted else None,
        "loaded_per_s_median": round(statistics.median(loaded)) if loaded else None,
        "accepted_per_s_samples": [round(r) for r in accepted],
        "loaded_per_s_samples": [round(r) for r in loaded],
        "accepted_per_s_overall": round(
            (last.count(signal, "accepted") - first.count(signal, "accepted")) / span
        ),
        "loaded_per_s_overall": round(
            (last.count(signal, "loaded") - first.count(signal, "loaded")) / span
        ),
        "seconds_to_load_the_rest": round(drained, 1),
        # the whole path: acknowledged and in the store, the load of the rest included
        "stored_per_s_end_to_end": round(
            (last.count(signal, "accepted") - first.count(signal, "accepted")) / (span + drained)
        ),
        "load_rounds": int(last.rounds - first.rounds),
        "evaluations_during": int(last.runs - first.runs),
        "daemon_cpu_us_per_record": round(1e6 * (last.cpu_s - first.cpu_s) / accepted_n, 1),
        "children_cpu_us_per_record": round(
            1e6 * (last.children_cpu_s - first.children_cpu_s) / accepted_n, 1
        ),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ingest", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--logs-seconds", type=float, default=120)
    parser.add_argument("--spans-seconds", type=float, default=45)
    parser.add_argument("--grpc-seconds", type=float, default=60, help="logs over OTLP/gRPC")
    parser.add_argument("--clients", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--records", type=int, default=1000, help="records per request")
    parser.add_argument("--every", default="30s", help="the daemon's schedule (default 30s)")
    parser.add_argument("--dir", default="/tmp/memory-watchdog-bench-ingest")
    parser.add_argument("--output", default=str(RESULTS), help="results file (its `ingest` key)")
    args = parser.parse_args(argv)
    load_at_start = round(os.getloadavg()[0], 2)
    proc, otlp, grpc, web, log = start_daemon(Path(args.dir), args.every)
    watcher = Watcher(proc.pid, web, Path(args.dir))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        time.sleep(2)
        durations = {
            "logs": args.logs_seconds,
            "spans": args.spans_seconds,
            "logs_grpc": args.grpc_seconds,
        }
        phases = {
            phase: run_phase(phase, seconds, args.clients, args.records, (otlp, grpc), watcher)
            for phase, seconds in durations.items()
            if seconds > 0
        }
    finally:
        watcher.stop.set()
        thread.join()
        proc.terminate()
    rss = [s.rss_mib for s in watcher.samples]
    proc.wait(timeout=180)
    document = {
        "command": "python -m benchmarks.ingest " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "clients": args.clients,
        "schedule_every": args.every,
        "goal_logs_per_s": GOAL_LOGS_PER_S,
        "interval_s": INTERVAL,
        "warmup_s": WARMUP,
        "phases": phases,
        "daemon_rss_mib": {
            "start": round(rss[0], 1),
            "peak": round(max(rss), 1),
            "end": round(rss[-1], 1),
            "over_s": round(watcher.samples[-1].t - watcher.samples[0].t),
            "every_10s": [round(r, 1) for r in rss[::10]],
        },
        "cpu_s": {
            "daemon_own": round(watcher.samples[-1].cpu_s, 1),
            "children": round(watcher.samples[-1].children_cpu_s, 1),  # loads, evaluations
        },
        "load_average_1m_at_start": load_at_start,
        "tracebacks_in_log": log.read_text(errors="replace").count("Traceback"),
    }
    _write(Path(args.output), document)
    print(json.dumps({k: v for k, v in document.items() if k != "machine"}, indent=2))
    return 0


def _write(output: Path, document: dict[str, Any]) -> None:
    """Into `output`'s `ingest` key, the other benchmarks' results kept."""
    results = json.loads(output.read_text()) if output.exists() else {}
    results["ingest"] = document
    output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
