"""`python -m benchmarks.ingest_abuse`: the receiver's memory and threads while it is abused.

A real `memory-watchdog daemon --otlp` (benchmarks.ingest.start_daemon) is
sent, one case after the other, what issue 23 found took it to gigabytes or
to a thread per connection; the daemon's VmRSS and thread count are read
from /proc every 50 ms during each case:

- `empty_records`: 4 clients at once, 5 times each, 16 KiB of gzip holding
  8.4 million empty log records (413);
- `empty_attributes`: 4 clients at once, 3 times each, one log record with
  8.4 million empty attributes (16 MiB once decompressed; stored: it is a
  valid record);
- `json_objects`: 4 clients at once, 3 times each, 16 MiB of JSON of 5.6
  million empty objects in the records array (413);
- `held_bodies`: 40 connections each announcing 16 MiB and sending 15 MiB of
  it, then holding;
- `idle`: 1,000 connections that send nothing.

    python -m benchmarks.ingest_abuse            # about a minute; prints and writes JSON
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.ingest import RESULTS, rss_mib, start_daemon

SIZE = 16 * 1024 * 1024


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def empty_records() -> bytes:
    """An ExportLogsServiceRequest of 16 MiB: one scope of 8.4M empty log records."""
    return _field(1, _field(2, b"\x12\x00" * ((SIZE - 20) // 2)))


def empty_attributes() -> bytes:
    """One log record with 8.4M empty attributes (KeyValue), 16 MiB."""
    record = b"\x32\x00" * ((SIZE - 30) // 2)
    return _field(1, _field(2, _field(2, record)))


def json_objects() -> bytes:
    inner = b"{}," * ((SIZE - 100) // 3) + b"{}"
    return b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + inner + b"]}]}]}"


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


class Peak:
    """VmRSS and threads of `pid`, sampled every 50 ms while a case runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss, self.threads = pid, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rss = max(self.rss, rss_mib(self.pid))
            self.threads = max(self.threads, threads(self.pid))
            self._stop.wait(0.05)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _post(port: int, body: bytes, content_type: str, gzipped: bool) -> int:
    headers = {"Content-Type": content_type}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request("POST", "/v1/logs", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _burst(port: int, body: bytes, content_type: str, clients: int, times: int) -> list[int]:
    statuses: list[int] = []
    packed = gzip.compress(body, 1)

    def client() -> None:
        for _ in range(times):
            statuses.append(_post(port, packed, content_type, True))

    workers = [threading.Thread(target=client) for _ in range(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return statuses


def _held(port: int, count: int) -> Callable[[], None]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: %d\r\n\r\n" % SIZE
        )
        sock.sendall(b"\0" * (SIZE - SIZE // 16))
        socks.append(sock)
    time.sleep(2)  # a benchmark: let the server take what was sent
    return lambda: [s.close() for s in socks] and None


def _idle(port: int, count: int) -> Callable[[], None]:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    time.sleep(2)
    return lambda: [s.close() for s in socks] and None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/watchdog-ingest-abuse"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    proc, otlp, _, _, log = start_daemon(args.dir, "1h")
    cases: dict[str, Any] = {}
    try:
        time.sleep(3)
        cases["start"] = {"rss_mib": round(rss_mib(proc.pid), 1), "threads": threads(proc.pid)}
        runs: dict[str, Callable[[], Any]] = {
            "empty_records": lambda: _burst(otlp, empty_records(), "application/x-protobuf", 4, 5),
            "empty_attributes": lambda: _burst(
                otlp, empty_attributes(), "application/x-protobuf", 4, 3
            ),
            "json_objects": lambda: _burst(otlp, json_objects(), "application/json", 4, 3),
            "held_bodies": lambda: _held(otlp, 40)(),
            "idle": lambda: _idle(otlp, 1000)(),
        }
        for name, run in runs.items():
            started = time.monotonic()
            with Peak(proc.pid) as peak:
                statuses = run()
            cases[name] = {
                "peak_rss_mib": round(peak.rss, 1),
                "peak_threads": peak.threads,
                "seconds": round(time.monotonic() - started, 1),
                "statuses": sorted(set(statuses)) if isinstance(statuses, list) else None,
            }
            print(name, cases[name], flush=True)
        cases["end"] = {"rss_mib": round(rss_mib(proc.pid), 1), "threads": threads(proc.pid)}
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    print(json.dumps(cases, indent=2))
    document = json.loads(args.output.read_text()) if args.output.exists() else {}
    document["ingest_abuse"] = cases
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"daemon log: {log}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
