"""The check kinds, one module each (`KINDS`, found by scanning this package), and what every
other module asks of a check's kind instead of testing its class: the kind a check carries
(`kind_of`), found in the registry its settings were validated against
(docs/architecture.md#a-check-kind-one-module).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from checks.base import CheckSpec, Comparison, NoDataPolicy, Severity
from checks.kinds.base import AnyKind, Declared, Kind, duration
from watchdog.core.durations import duration_ms
from watchdog.core.errors import RegistryError
from watchdog.core.settings import Plugins
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.plugins import scanned

# Every check kind, by module name: each module defining `KIND` (a Kind) is one kind, so a
# new kind is one module and no list is edited.
KINDS: tuple[AnyKind, ...] = tuple(scanned(__name__, "KIND", Kind))  # type: ignore[type-abstract]


def kind_of(spec: CheckSpec) -> AnyKind:
    """The kind of `spec` (what `configured_checks` found for it in the settings' registry)."""
    if not isinstance(spec.kind, Kind):
        raise RegistryError(f"check {spec.id} has no kind (build it with configured_checks)")
    return spec.kind


def kind_named(plugins: Plugins, spec: CheckSpec, name: str) -> AnyKind:
    """The kind `name` of `plugins`, which a built-in check declares; RegistryError when it is
    not registered or does not take `spec`'s parameters."""
    kind = plugins.kind(name)
    if not isinstance(kind, Kind):
        raise RegistryError(f"check {spec.id}: its kind {name!r} is not registered")
    if not isinstance(spec.params, kind.params):
        raise RegistryError(
            f"check {spec.id}: kind {name!r} does not take {type(spec.params).__name__}"
        )
    return kind


def spec_of(plugins: Plugins, config: CustomCheck) -> CheckSpec:
    """One `[[checks.custom]]` table as a CheckSpec, by its kind in `plugins`."""
    kind = plugins.kind(config.kind)
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
        kind=kind,
    )


def session_scopes(specs: Iterable[CheckSpec]) -> dict[str, str]:
    """The session filters of the checks that narrow their own sessions, by check id."""
    found = {}
    for spec in specs:
        predicate = kind_of(spec).session_filter(spec.params)
        if predicate:
            found[spec.id] = predicate
    return found


def describe_check(spec: CheckSpec) -> list[tuple[str, str]]:
    """The parameters that define a check, so the reader can reproduce its verdict."""
    found = kind_of(spec).describe(spec.params)
    if spec.min_samples:
        found.append(("min_samples", str(spec.min_samples)))
    if spec.window_ms is not None:
        found.append(("window", duration(spec.window_ms)))
    return found


def payload_names(specs: Sequence[CheckSpec]) -> list[str]:
    """The event names whose payload some enabled check reads."""
    names = {
        name for spec in specs if spec.enabled for name in kind_of(spec).payload_names(spec.params)
    }
    return sorted(names)
