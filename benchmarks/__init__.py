"""Benchmarks: synthetic telemetry at scale, and the watchdog measured against one scan.

`python -m benchmarks` (or `make bench`) generates joelclaw- and
otel_logs-shaped tables inside the embedded engine with `INSERT ... SELECT`
over `numbers(N)`, then times, side by side, the floor (one scan extracting
the session id), the full check suite in-process and as the CLI, and, at 1M
events, a naive pandas script. Results land in `benchmarks/results.json`.
None of this runs in the test suite.
"""
