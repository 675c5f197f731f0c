"""Alerts: the lifecycle, the state tables, the outbox, routes and receivers, silences.

The entry point is `alerts.pipeline.process`; what `status`, `alerts` and the page read back is
`alerts.records`. The rules are docs/spec.md#8-alerts-chat, what each module holds
docs/architecture.md#alerts.
"""
