"""The foundation: errors, durations, times, URLs, settings, the store.

Nothing here imports a layer above it (docs/architecture.md#watchdogcore).
"""
