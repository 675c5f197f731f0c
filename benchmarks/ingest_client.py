"""One ingest client of `benchmarks.ingest`, as a process of its own (its arguments: `main`).

It sends over one keep-alive connection until its stop time, each request new (its timestamps
rewritten in place), a refused one (429/503) sent again after its Retry-After; a PATH of
`grpc:/<service>/<method>` sends the same bytes as OTLP/gRPC calls on one channel instead (a
refusal with RetryInfo sent again after it) (docs/performance.md#otlp-ingest).
"""

from __future__ import annotations

import http.client
import json
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def fresh(body: bytes, offsets: list[int], number: int) -> Iterator[bytes]:
    """`body` again and again, each time its fixed64 timestamps (at `offsets`) rewritten past
    the previous ones; client `number`'s never meet another client's."""
    buffer = bytearray(body)
    base = time.time_ns() + number * 10**15
    while True:
        base += len(offsets)
        for k, offset in enumerate(offsets):
            struct.pack_into("<Q", buffer, offset, base + k)
        yield bytes(buffer)


def send(
    port: int, path: str, body: bytes, offsets: list[int], number: int, stop_at: float
) -> dict[str, int]:
    requests = fresh(body, offsets, number)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/x-protobuf"}
    sent = refused = 0
    while time.time() < stop_at:
        request = next(requests)
        while time.time() < stop_at:
            try:
                connection.request("POST", path, body=request, headers=headers)
                answer = connection.getresponse()
                answer.read()
            except OSError:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                continue
            if answer.status == 200:
                sent += 1
                break
            refused += 1
            time.sleep(float(answer.getheader("Retry-After") or 1))
    connection.close()
    return {"requests": sent, "refused": refused}


def send_grpc(
    port: int, method: str, body: bytes, offsets: list[int], number: int, stop_at: float
) -> dict[str, int]:
    import grpc  # only this mode needs it

    requests = fresh(body, offsets, number)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    export = channel.unary_unary(method)  # the request as bytes, the response as bytes
    sent = refused = 0
    while time.time() < stop_at:
        request = next(requests)
        while time.time() < stop_at:
            try:
                export(request, timeout=120)
            except grpc.RpcError:
                refused += 1
                time.sleep(1)
                continue
            sent += 1
            break
    channel.close()
    return {"requests": sent, "refused": refused}


def main(argv: list[str]) -> int:
    """Send until STOP_AT, then print {"requests": answered 200 (OK), "refused": N}.

        python -m benchmarks.ingest_client PORT PATH TEMPLATE NUMBER START_AT STOP_AT

    Reads the serialised request TEMPLATE and the offsets of its fixed64 timestamps
    (TEMPLATE.offsets, JSON), and waits for START_AT (epoch seconds) before the first request.
    """
    port, path, template, number, start_at, stop_at = argv
    body = Path(template).read_bytes()
    offsets = json.loads(Path(template + ".offsets").read_text())
    time.sleep(max(0.0, float(start_at) - time.time()))
    how = send_grpc if path.startswith("grpc:") else send
    told = how(int(port), path.removeprefix("grpc:"), body, offsets, int(number), float(stop_at))
    print(json.dumps(told))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
