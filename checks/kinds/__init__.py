"""The check kinds, one module each, and `KINDS`, the registry every other module asks instead of
testing a check's class; registering a declarable kind also registers its table's model with
the settings loader (docs/architecture.md#a-check-kind-one-module).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Sequence

from checks.base import CheckSpec, Comparison, KindParams, NoDataPolicy, Severity
from checks.kinds.base import AnyKind, Declared, Kind, duration
from watchdog.core.durations import duration_ms
from watchdog.core.errors import RegistryError
from watchdog.core.settings.custom import CUSTOM_KINDS, CustomCheck


class Kinds:
    """The registered kinds, by the type of their parameters and by name."""

    def __init__(self) -> None:
        self._by_params: dict[type[KindParams], AnyKind] = {}
        self._by_name: dict[str, AnyKind] = {}

    def register(self, kind: AnyKind) -> None:
        """Add `kind`; a kind config can declare becomes declarable (`[[checks.custom]]`)."""
        if kind.name in self._by_name or kind.params in self._by_params:
            raise ValueError(f"check kind {kind.name!r} is registered already")
        self._by_params[kind.params] = kind
        self._by_name[kind.name] = kind
        if isinstance(kind, Declared):
            CUSTOM_KINDS.register(kind.name, kind.config)

    def unregister(self, name: str) -> None:
        """Remove the kind `name` (a kind a test registered for itself)."""
        kind = self._by_name.pop(name)
        del self._by_params[kind.params]
        CUSTOM_KINDS.unregister(name)

    def __iter__(self) -> Iterator[AnyKind]:
        return iter(self._by_name.values())

    def of(self, spec: CheckSpec) -> AnyKind:
        """The kind of `spec`."""
        return self._by_params[type(spec.params)]

    def spec_of(self, config: CustomCheck) -> CheckSpec:
        """One `[[checks.custom]]` table as a CheckSpec, by its kind."""
        kind = self._by_name.get(config.kind)
        if not isinstance(kind, Declared):
            raise RegistryError(f"check {config.id}: kind {config.kind!r} is not declarable")
        params, unit = kind.params_of(config)
        return CheckSpec(
            id=config.id,
            params=params,
            target=config.target_number,
            comparison=Comparison(config.comparison),
            severity=Severity(config.severity),
            min_samples=config.min_samples,
            unit=unit,
            description=config.description,
            enabled=config.enabled,
            window_ms=duration_ms(config.window) if config.window is not None else None,
            no_data=NoDataPolicy(config.no_data),
        )

    def scopes(self, specs: Iterable[CheckSpec]) -> dict[str, str]:
        """The session filters of the checks that narrow their own sessions, by check id."""
        found = {}
        for spec in specs:
            predicate = self.of(spec).session_filter(spec.params)
            if predicate:
                found[spec.id] = predicate
        return found

    def describe(self, spec: CheckSpec) -> list[tuple[str, str]]:
        """The parameters that define a check, so the reader can reproduce its verdict."""
        found = self.of(spec).describe(spec.params)
        if spec.min_samples:
            found.append(("min_samples", str(spec.min_samples)))
        if spec.window_ms is not None:
            found.append(("window", duration(spec.window_ms)))
        return found

    def payload_names(self, specs: Sequence[CheckSpec]) -> list[str]:
        """The event names whose payload some enabled check reads."""
        names = {
            name
            for spec in specs
            if spec.enabled
            for name in self.of(spec).payload_names(spec.params)
        }
        return sorted(names)


def scanned(package: str = __name__) -> list[AnyKind]:
    """The kinds of the modules of `package`, by module name: each module defining `KIND` (a
    `Kind`) is one kind, so a new kind is one module and no list is edited."""
    found = []
    modules = pkgutil.iter_modules(importlib.import_module(package).__path__)
    for module in sorted(modules, key=lambda m: m.name):
        kind = getattr(importlib.import_module(f"{package}.{module.name}"), "KIND", None)
        if kind is None:
            continue
        if not isinstance(kind, Kind):
            raise RegistryError(f"{package}.{module.name}.KIND is no check kind")
        found.append(kind)
    return found


KINDS = Kinds()
for _kind in scanned():
    KINDS.register(_kind)
