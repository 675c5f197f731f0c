"""The shared scans: each reads the events once for every check of its kinds.

A scan is a typed plan the check kinds (`checks.kinds`) add to: the session
scan (`session`: obligations, outcome counts, freshness; rendered for raw
events and, by `checks.scans.state`, for the session state), the window scan
(`window`: quantiles, streaks, shares) and the deviation classification
(`deviation`). Data values are bound parameters (`Binder`); docs/architecture.md
says how a kind adds itself.
"""
