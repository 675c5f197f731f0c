"""The receivers an alert can go to: Slack, stdout, an Alertmanager webhook, PagerDuty.

Each implements `alerts.base.Notifier`; `alerts.notifiers` registers them by
kind and builds the configured ones. `http` holds the retry, backoff and
Retry-After rules the webhook and PagerDuty share (Slack's are slack-sdk's
handlers, paced by the same rules); `secrets` masks what they must not show.
"""
