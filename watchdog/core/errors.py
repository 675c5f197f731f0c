"""The watchdog's errors: one root, a few kinds, each building its own message and exit code.

The CLI turns a `WatchdogError` into one line on stderr and its `exit_code`
(docs/spec.md#7-command-line; docs/architecture.md#watchdogcore).
"""

from __future__ import annotations

from collections.abc import Sequence

from watchdog.core.text import shell_word


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

    @property
    def problems(self) -> tuple[ConfigError, ...]:
        """Each problem this error stands for: itself (ConfigErrors: every one it holds)."""
        return (self,)


class ConfigErrors(ConfigError):
    """Every problem found in one config (`config check` lists each on its own line, as
    promtool and amtool do); a command names the first and how many more there are."""

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        first = problems[0]
        self._problems = tuple(problems)
        super().__init__(first.key, first.problem, origin=first.origin)

    @property
    def problems(self) -> tuple[ConfigError, ...]:
        return self._problems

    def __str__(self) -> str:
        more = len(self.problems) - 1
        if not more:
            return super().__str__()
        plural = "s" if more > 1 else ""
        command = "memory-watchdog config check"
        if self.origin:
            command += f" --config {shell_word(self.origin)}"
        return f"{super().__str__()} (and {more} more problem{plural}: `{command}` lists every one)"

    @staticmethod
    def of(problems: Sequence[ConfigError]) -> ConfigError:
        """One problem as itself, several as ConfigErrors (each, when one is ConfigErrors)."""
        flat = [one for p in problems for one in p.problems]
        return flat[0] if len(flat) == 1 else ConfigErrors(flat)


class StoreError(WatchdogError):
    """The store could not be read (exit 3); the URL is always shown masked."""

    exit_code = 3

    def __init__(self, url_masked: str, problem: str, *, refused: bool = False) -> None:
        self.url_masked = url_masked
        self.problem = problem
        # The store answered that it will not run this statement as it is (its SQL or its data):
        # it was not done. False when the outcome is unknown (no answer, a timeout, a lost
        # answer: an insert may have been done) or the store cannot run it now (its load).
        self.refused = refused
        super().__init__(f"store {url_masked}: {problem}")


class StoreLockedError(StoreError):
    """Another process holds the embedded store directory."""


class MissingStoreError(StoreError):
    """The embedded store directory does not exist (and this command does not create one).

    `demo_store` is the URL of the store `memory-watchdog demo` filled last, when the missing
    one is a data directory's default store and there is one: then the message names it.
    """

    def __init__(self, url_masked: str, demo_store: str | None = None) -> None:
        self.demo_store = demo_store
        quoted = shell_word(demo_store) if demo_store else ""
        elsewhere = (
            "point --store or WATCHDOG_STORE_URL at your ClickHouse"
            " (http(s)://user:password@host:8123/db) or an existing store"
        )
        if demo_store:
            problem = (
                "there is no store here (this command does not create one), but"
                f" `memory-watchdog demo` wrote its own: add --store {quoted}"
                f" (e.g. memory-watchdog check --store {quoted}); for your own telemetry,"
                f" {elsewhere}"
            )
        else:
            problem = (
                f"there is no store here, and this command does not create one: {elsewhere},"
                " or fill a new one with `memory-watchdog demo --store <URL>`"
            )
        super().__init__(url_masked, problem)


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


class RegistryError(RuntimeError):
    """The plugin registries are inconsistent (a kind, preset, receiver or built-in check
    declared halfway, twice, or of the wrong type): a bug in the code, not in the config, so
    no `WatchdogError`. Raised by a real check, never an `assert` that `python -O` drops."""
