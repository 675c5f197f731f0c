"""The daemon: the schedule, each tick in a child process, its spool, pages, metrics, the receiver.

How to run it: docs/operations.md#the-daemon; what each module holds:
docs/architecture.md#watchdogrunner-watchdogreport-watchdogdaemon-watchdogdemo-watchdogcli.
"""
