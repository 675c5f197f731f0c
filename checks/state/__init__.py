"""Session state kept at insert time (`source.state`): its table (`layout`) and its reading (`read`).

docs/sources.md says when to use it and what it costs; docs/architecture.md
how a session scan is rendered from it.
"""
