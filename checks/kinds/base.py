"""What a check kind is: the one module owning its parameters, its config model, its part of a
scan and the reading back, its triage and its description (docs/development.md#adding-a-check-kind).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction
from typing import Any, Generic, TypeVar

from checks.base import CheckResult, CheckSpec, KindParams, Unit
from checks.breakdown import Triage
from checks.kinds.obligations import Obligation
from checks.scans.binder import Binder
from checks.scans.plans import Context, Plans, Reader
from checks.scans.session import SessionScan
from checks.triage import plain
from watchdog.core.durations import format_ms
from watchdog.core.errors import RegistryError
from watchdog.core.settings.custom import CustomCheck

P = TypeVar("P", bound=KindParams)
C = TypeVar("C", bound=CustomCheck)

Described = list[tuple[str, str]]  # (parameter, what it is set to), as the page shows them


duration = format_ms  # the kinds' name for it


@dataclass(frozen=True)
class Flag:
    """What a check counts against one event, as SQL over a normalized event row (`explain`).

    Among the events of `names`, those meeting `condition` count against
    the check; `words` (SQL, a string) says how, in words of a closed
    vocabulary or of the check's config, never a payload value. With
    `cites` (SQL, the ids an event cites), the event counts only when one
    of them exists nowhere in the lookback.
    """

    names: tuple[str, ...]
    condition: str
    words: str
    params: Mapping[str, Any] = field(default_factory=dict)
    cites: str = ""


@dataclass(frozen=True)
class ExampleEvent:
    """One event of a kind's example: its session, its name, its time after the window's
    start, and its metadata (the event's payload)."""

    session: str
    name: str
    after: timedelta
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Example:
    """A `[[checks.custom]]` table of a kind and the events that breach it (added to the
    kind contract suite's world, tests/test_kinds.py): a new kind brings its own breach."""

    table: Mapping[str, Any]
    events: tuple[ExampleEvent, ...] = ()


class Kind(ABC, Generic[P]):
    """A check kind: `name` (its `kind` in config), its parameters' type, its handling."""

    name: str
    params: type[P]
    # The model of its `[[checks.custom]]` table (`Declared`); None: only built-in checks use it.
    config: type[CustomCheck] | None = None
    # The SLI an SLO over a check of this kind measures (watchdog.core.settings.slo: "ratio",
    # "latency"); None: no SLO can follow it.
    sli: str | None = None
    triaged = True  # whether a breach has failing items to break down (freshness has none)
    # Why `explain` shows nothing of one session for this kind (no `flag`, no `obligations`);
    # "" for a kind that shows what it counts, as every kind should (the contract suite).
    unexplained = ""

    def of(self, spec: CheckSpec) -> P:
        """`spec`'s parameters, which are this kind's."""
        if not isinstance(spec.params, self.params):
            raise RegistryError(f"check {spec.id} is no {self.name} check")
        return spec.params

    @abstractmethod
    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        """Add `spec` to the scan that judges it; the reader of its result from that scan's row.

        When `plans.dims` is set, the reader also returns the check's triage
        breakdown if the scan can carry it.
        """

    def triage(
        self, ctx: Context, dims: Sequence[str], spec: CheckSpec, result: CheckResult
    ) -> Triage | None:
        """The breakdown of a breached check whose scan did not carry it.

        By default, the check planned alone with the dimensions that are no
        free text, on the same source (its scan then carries the breakdown).
        """
        plans = Plans(ctx.source, dims=tuple(plain(dims)))
        read = self.plan(plans, spec)
        ((_, scanned, row),) = tuple(plans.run(ctx.store, ctx.window))
        if isinstance(row, BaseException):
            raise row
        return read(row, scanned).triage

    @abstractmethod
    def describe(self, params: P) -> Described:
        """The parameters that define a check of this kind, in words (the page)."""

    def obligations(self, params: P) -> Sequence[Obligation]:
        """The obligations a check of this kind judges (`explain` lists those of a session)."""
        return ()

    def judges(self, scan: SessionScan, spec: CheckSpec) -> str:
        """SQL per session of `scan`: whether the check judges its obligations (real sessions)."""
        return "real"

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag | None:
        """What a check of this kind counts against one event (`explain`), its values bound."""
        return None

    def example(self) -> Example | None:
        """A table of this kind breached by a few events, for the contract suite (declarable
        kinds that the suite's own tables do not cover must have one)."""
        return None

    def payload_names(self, params: P) -> Sequence[str]:
        """The event names whose payload a check of this kind reads (the narrow table keeps it)."""
        return ()

    def slo_objective(self, params: P) -> Fraction | None:
        """The objective of an SLO over a check of this kind that names none (a quantile's q:
        95% of latencies under the target); None: an SLO over it must name one."""
        return None

    def slo_counts(self, result: CheckResult) -> tuple[int, int] | None:
        """The good and bad events of an SLO over a check of this kind, in `result` (its
        counts over a window, docs/slo.md#buckets); None: no SLO can follow this kind."""
        return None

    def slo_lead(self, params: P) -> timedelta | None:
        """How far before a bucket an SLO over this kind reads to count the bucket (the deadlines
        falling in it look back their grace); None: the whole reach of a window one bucket
        long, the lookback (docs/slo.md#what-a-burn-tick-costs)."""
        return None

    def session_filter(self, params: P) -> str | None:
        """The check's own session filter, if it has one (a `scope_<id>` of the source)."""
        return None


class Declared(Kind[P], Generic[P, C]):
    """A kind that `[[checks.custom]]` can declare: `config` is the model of its table."""

    config: type[C]

    @abstractmethod
    def from_config(self, config: C) -> tuple[P, Unit]:
        """A table of this kind as its parameters and the unit of its value."""

    def params_of(self, config: CustomCheck) -> tuple[KindParams, Unit]:
        """`config` (a table of this kind) as its parameters and unit."""
        if not isinstance(config, self.config):
            raise RegistryError(f"check {config.id}: its table is no {self.name} table")
        return self.from_config(config)


AnyKind = Kind[Any]
