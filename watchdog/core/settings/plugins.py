"""`Plugins`: the registry the settings are validated against, passed to them, never global.

The features above the settings declare themselves once each, as one registration object:
a check kind (`checks.kinds`), a built-in check (`checks.builtin`), a preset
(`checks.layouts`) and a receiver (`alerts.receivers`). Each holds its config model (or
facts) and its implementation; the settings read only the protocols below, and the layers
above find the implementation again in `settings.plugins`. The commands validate against
the registry `watchdog.runner.plugins` assembles; a test builds its own with `with_`
(docs/development.md#plugins-one-registration-each).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from watchdog.core.errors import RegistryError
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.receivers import ReceiverModel
from watchdog.core.units import Unit

T = TypeVar("T")


class KindEntry(Protocol):
    """A check kind: its name, the model of its `[[checks.custom]]` table (None: it is
    not declarable, only built-in checks use it), and the SLI an SLO over one of its checks
    measures (`settings.slo`: "ratio", "latency"; None: an SLO cannot follow it)."""

    @property
    def name(self) -> str: ...

    @property
    def sli(self) -> str | None: ...

    @property
    def config(self) -> type[CustomCheck] | None: ...


class CheckEntry(Protocol):
    """A built-in check: its id, the unit its target is written in, and its kind's name."""

    @property
    def id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def unit(self) -> Unit: ...


class PresetEntry(Protocol):
    """A preset: its name, its table when `source.table` is unset, and the OTLP signal whose
    OpenTelemetry Collector exporter table it reads (None: no exporter's)."""

    @property
    def name(self) -> str: ...

    @property
    def table(self) -> str: ...

    @property
    def signal(self) -> str | None: ...


class ReceiverEntry(Protocol):
    """A receiver kind: the model of its `[alerts.<kind>]` table (its `kind` names it)."""

    @property
    def model(self) -> type[ReceiverModel]: ...


@dataclass(frozen=True, eq=False)
class Plugins:
    """Every plugin the settings know, in order (report order for the built-in checks).

    `default_preset` is the preset of a source that names none. `origin` is where the registry
    is importable from (`module:NAME`): settings of it cross to a child process by that name
    (pickled, as a class is); "" for a registry a test builds. Identity is the registry's
    equality, so each one gets its settings models built once (`settings_model`).
    """

    kinds: tuple[KindEntry, ...] = ()
    checks: tuple[CheckEntry, ...] = ()
    presets: tuple[PresetEntry, ...] = ()
    receivers: tuple[ReceiverEntry, ...] = ()
    default_preset: str = ""
    origin: str = ""
    _kinds: dict[str, KindEntry] = field(init=False, repr=False)
    _checks: dict[str, CheckEntry] = field(init=False, repr=False)
    _presets: dict[str, PresetEntry] = field(init=False, repr=False)
    _receivers: dict[str, ReceiverEntry] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        checks = _by_name("built-in check", [(e.id, e) for e in self.checks])
        presets = _by_name("preset", [(e.name, e) for e in self.presets])
        if self.presets and self.default_preset not in presets:
            raise RegistryError(f"the default preset {self.default_preset!r} is not registered")
        object.__setattr__(
            self, "_kinds", _by_name("check kind", [(e.name, e) for e in self.kinds])
        )
        object.__setattr__(self, "_checks", checks)
        object.__setattr__(self, "_presets", presets)
        receivers = _by_name("receiver kind", [(e.model.kind, e) for e in self.receivers])
        object.__setattr__(self, "_receivers", receivers)

    def with_(
        self,
        *,
        kinds: Iterable[KindEntry] = (),
        checks: Iterable[CheckEntry] = (),
        presets: Iterable[PresetEntry] = (),
        receivers: Iterable[ReceiverEntry] = (),
    ) -> Plugins:
        """This registry plus more plugins (a test's kind, say): a new registry, this one kept."""
        return Plugins(
            kinds=(*self.kinds, *kinds),
            checks=(*self.checks, *checks),
            presets=(*self.presets, *presets),
            receivers=(*self.receivers, *receivers),
            default_preset=self.default_preset,
        )

    @staticmethod
    def imported(origin: str) -> Plugins:
        """The registry importable from `origin` (`module:NAME`)."""
        module, _, name = origin.partition(":")
        found = getattr(importlib.import_module(module), name, None)
        if not isinstance(found, Plugins):
            raise RegistryError(f"{origin} is no plugin registry")
        return found

    def kind(self, name: str) -> KindEntry | None:
        return self._kinds.get(name)

    def preset(self, name: str) -> PresetEntry | None:
        return self._presets.get(name)

    def receiver(self, kind: str) -> ReceiverEntry | None:
        return self._receivers.get(kind)

    @property
    def check_ids(self) -> tuple[str, ...]:
        """The built-in checks' ids, in report order."""
        return tuple(check.id for check in self.checks)

    def unit_of(self, check_id: str) -> Unit | None:
        """The unit of the built-in check `check_id` (None: no built-in check has that id)."""
        check = self._checks.get(check_id)
        return check.unit if check is not None else None

    def sli_of(self, check_id: str) -> str | None:
        """The SLI of the built-in check `check_id`'s kind (None: no such check, or no SLI)."""
        check = self._checks.get(check_id)
        return self.sli_of_kind(check.kind) if check is not None else None

    def sli_of_kind(self, name: str) -> str | None:
        """The SLI a check of the kind `name` measures (None: no such kind, or no SLI)."""
        kind = self._kinds.get(name)
        return kind.sli if kind is not None else None

    def preset_of_signal(self, signal: str) -> PresetEntry:
        """The preset reading the exporter's table of `signal` (what the receiver writes)."""
        for preset in self.presets:
            if preset.signal == signal:
                return preset
        raise RegistryError(f"no preset reads the OpenTelemetry {signal} exporter's table")

    def receiver_tables(self) -> str:
        """The tables that configure a receiver, for "no receiver is configured (add one of …)"."""
        return ", ".join(entry.model.table() for entry in self.receivers)


def _by_name(what: str, entries: Iterable[tuple[str, T]]) -> dict[str, T]:
    """`entries` by name; RegistryError when two have the same."""
    found: dict[str, T] = {}
    for name, entry in entries:
        if name in found:
            raise RegistryError(f"{what} {name!r} is registered twice")
        found[name] = entry
    return found


def scanned(package: str, attribute: str, expected: type[T]) -> list[T]:
    """The `attribute` of each module of `package` that defines one, by module name: a
    plugin is one module, and no list is edited to add one. RegistryError when a module's
    `attribute` is not an `expected`."""
    found = []
    modules = pkgutil.iter_modules(importlib.import_module(package).__path__)
    for module in sorted(modules, key=lambda m: m.name):
        value = getattr(importlib.import_module(f"{package}.{module.name}"), attribute, None)
        if value is None:
            continue
        if not isinstance(value, expected):
            raise RegistryError(f"{package}.{module.name}.{attribute} is no {expected.__name__}")
        found.append(value)
    return found
