"""memory-watchdog: the verify layer of agent memory."""

__version__ = "0.1.0"
