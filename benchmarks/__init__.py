"""Benchmarks: synthetic telemetry at scale, and what users run measured against one scan.

`python -m benchmarks` (or `make bench`) generates joelclaw- and otel_logs-shaped tables inside
the embedded engine with `INSERT ... SELECT` over `numbers(N)`, in two event mixes, keeps them
between runs, then times, side by side and each as a process of its own, the floor (one scan
extracting the session id), `memory-watchdog check --format text`, `check --format json` and
`daemon --once`. Results land in `benchmarks/results.json`; none of this runs in the test suite
(docs/performance.md#how-the-benchmark-measures).
"""
