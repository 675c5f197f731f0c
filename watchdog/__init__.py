"""memory-watchdog: the verify layer of agent memory (docs/spec.md#1-the-problem)."""

__version__ = "0.1.0"
