"""Alerts in chat (docs/spec.md section 8): state machine, outbox, Slack, silences.

The entry point is `alerts.pipeline.process`; the read helpers for status
pages are in `alerts.state`. Modules: `base` (Message, Notifier, Deadline),
`lifecycle` (the pure state machine), `state` (the watchdog's tables),
`outbox` (write before send, deliver, retry), `notifiers` (Slack, stdout,
the registry), `render` (Jinja2 Block Kit templates), `silences`, `quiet`
(quiet hours), `commands` (the CLI), `testing` (fakes for tests).
"""
