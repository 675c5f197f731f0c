"""Session state kept at insert time (`source.state`): its table (`layout`) and its reading (`read`).

When to use it and what it costs: docs/sources.md#the-session-state-sourcestate; how a session
scan is rendered from it: docs/architecture.md#a-check-kind-one-module.
"""
