"""The checks: sources, the check kinds, their shared scans, verdicts, triage, the session state.

Above watchdog.core, below alerts; what each module holds: docs/architecture.md#checks.
"""
