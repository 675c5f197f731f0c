"""The demo: realistic agent telemetry with faults injected at known counts, and a real check.

What each module holds:
docs/architecture.md#watchdogrunner-watchdogreport-watchdogdaemon-watchdogdemo-watchdogcli.
"""
