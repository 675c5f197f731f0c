"""The receivers an alert can go to: Slack, stdout, a webhook, PagerDuty, Alertmanager, Telegram.

Each implements `alerts.base.Notifier`; `alerts.notifiers` registers them by kind and builds the
configured ones. `http` holds the retry, backoff and Retry-After rules the other HTTP receivers
share (Slack's are slack-sdk's handlers, paced by the same rules); `secrets` masks what they
must not show (docs/alerts.md#receivers-and-routes).
"""
