"""The watchdog's errors: one root, a few kinds, each building its own message.

The CLI turns a `WatchdogError` into one line on stderr and its `exit_code`.
"""

from __future__ import annotations


class WatchdogError(Exception):
    """Something the user must fix; `str(err)` is the one line we print."""

    exit_code = 1


class UsageError(WatchdogError):
    """A bad command line (exit 2)."""

    exit_code = 2


class ConfigError(WatchdogError):
    """A config value that cannot be used (exit 2), named by its key path."""

    exit_code = 2

    def __init__(self, key: str, problem: str, *, origin: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.origin = origin
        where = f"{origin}: " if origin else ""
        super().__init__(f"{where}{key}: {problem}" if key else f"{where}{problem}")


class StoreError(WatchdogError):
    """The store could not be read (exit 3); the URL is always shown masked."""

    exit_code = 3

    def __init__(self, url_masked: str, problem: str) -> None:
        self.url_masked = url_masked
        self.problem = problem
        super().__init__(f"store {url_masked}: {problem}")


class StoreLockedError(StoreError):
    """Another process holds the embedded store directory."""


class MissingStoreError(StoreError):
    """The embedded store directory does not exist (and this command does not create one)."""

    def __init__(self, url_masked: str) -> None:
        super().__init__(
            url_masked,
            "there is no store here, and this command does not create one: point --store"
            " or WATCHDOG_STORE_URL at your ClickHouse (http(s)://user:password@host:8123/db)"
            " or an existing store, or fill a new one with `memory-watchdog demo --store <URL>`",
        )


class StoreURLUsageError(WatchdogError):
    """A store URL that is not one (exit 2: a usage error, not an unreachable store)."""

    exit_code = 2

    def __init__(self, url_masked: str, problem: str) -> None:
        self.url_masked = url_masked
        self.problem = problem
        super().__init__(f"store URL {url_masked}: {problem}")


class NotifyError(WatchdogError):
    """A notifier could not deliver; never changes the exit code of `check`."""

    def __init__(self, notifier: str, problem: str) -> None:
        self.notifier = notifier
        self.problem = problem
        super().__init__(f"notifier {notifier}: {problem}")
