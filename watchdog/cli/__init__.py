"""The command line: one module per command; nothing imports it.

The commands and their exit codes: docs/spec.md#7-command-line; what each module holds:
docs/architecture.md#watchdogrunner-watchdogreport-watchdogdaemon-watchdogdemo-watchdogcli.
"""
