"""The twelve built-in checks of docs/spec.md section 5, as instances of the check kinds, each
declared once: its `Builtin` in `BUILTINS` (its id, its unit, its builder).

`configured_checks` builds them in report order with their `[checks.<id>]` overrides, then the
custom checks (docs/spec.md#5-checks; adding one: docs/development.md#adding-a-built-in-check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from checks.base import CheckSpec, Comparison, NoDataPolicy, Severity
from checks.kinds import kind_named, spec_of
from checks.kinds.coverage import Counted, Coverage
from checks.kinds.deviation_contract import DeviationContract
from checks.kinds.deviation_evidence import DeviationEvidence
from checks.kinds.freshness import Freshness
from checks.kinds.obligations import Anchor, Obligation
from checks.kinds.outcome_rate import OutcomeRate
from checks.kinds.quantile import Quantile
from checks.kinds.share import Share
from checks.kinds.streak import Streak
from checks.scans.session import PayloadMatch
from watchdog.core.durations import duration_ms
from watchdog.core.errors import RegistryError
from watchdog.core.settings import Settings
from watchdog.core.units import Unit
from watchdog.core.vocabulary import FRESHNESS_CHECK_ID


@dataclass(frozen=True)
class Builtin:
    """One built-in check: its id, the unit of its value and target, its kind's name, and how
    the settings build it (`build(settings, this)`: a CheckSpec of this id and unit, whose
    parameters are that kind's)."""

    id: str
    unit: Unit
    kind: str
    build: Callable[[Settings, Builtin], CheckSpec]


FIVE_MINUTES_MS = 5 * 60 * 1000
ONE_MINUTE_MS = 60 * 1000


def _recall_coverage(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Coverage(
            obligations=(
                Obligation(
                    anchor=Anchor.START,
                    required=s.events.recall_any,
                    grace_ms=duration_ms(s.window.recall_grace),
                    label="start recall",
                    grace_key="recall_grace",
                ),
            ),
            breach_phrase="started without recall",
        ),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.CRITICAL,
        min_samples=0,
        unit=check.unit,
        description="Every session recalls memory within recall_grace of its first event.",
    )


def _observe_coverage(s: Settings, check: Builtin) -> CheckSpec:
    grace = duration_ms(s.window.observe_grace)
    return CheckSpec(
        id=check.id,
        params=Coverage(
            obligations=(
                Obligation(
                    anchor=Anchor.END,
                    required=s.events.observe_any,
                    grace_ms=grace,
                    lead_ms=FIVE_MINUTES_MS,
                    ends=s.events.session_end,
                    idle_ms=duration_ms(s.window.idle_timeout),
                    label="end observe",
                    grace_key="observe_grace",
                ),
                Obligation(
                    anchor=Anchor.EVENT,
                    required=s.events.observe_any,
                    grace_ms=grace,
                    lead_ms=ONE_MINUTE_MS,
                    triggers=s.events.compaction,
                    label="compaction observe",
                    grace_key="observe_grace",
                    after="after a compaction",
                ),
            ),
            breach_phrase="ended or compacted without observe",
        ),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.CRITICAL,
        min_samples=0,
        unit=check.unit,
        description="Every session observes at its end and on each compaction.",
    )


def _observe_failure_rate(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=OutcomeRate(
            started=s.events.observe_requested,
            completed=s.events.observe_completed,
            failed=s.events.observe_failed,
            grace_ms=duration_ms(s.window.observe_grace),
            noun="observes",
        ),
        target=0.05,
        comparison=Comparison.GE,
        severity=Severity.CRITICAL,
        min_samples=20,
        unit=check.unit,
        description="Failed and lost observes stay under the target share.",
    )


def _recall_failure_rate(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=OutcomeRate(
            started=s.events.recall_started,
            completed=s.events.recall_completed,
            failed=s.events.recall_failed,
            grace_ms=duration_ms(s.window.recall_grace),
            noun="recalls",
        ),
        target=0.05,
        comparison=Comparison.GE,
        severity=Severity.WARNING,
        min_samples=20,
        unit=check.unit,
        description="Failed and lost recalls stay under the target share.",
    )


def _recall_latency_p95(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Quantile(events=s.events.recall_completed, q_num=95, q_den=100, noun="recalls"),
        target=3000,
        comparison=Comparison.GE,
        severity=Severity.WARNING,
        min_samples=20,
        unit=check.unit,
        description="The exact p95 (nearest rank) of completed recall latency.",
    )


def _circuit_breaker(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Streak(
            bad=s.events.recall_failed + s.events.observe_failed,
            good=s.events.recall_completed + s.events.observe_completed,
        ),
        target=3,
        comparison=Comparison.GT,
        severity=Severity.CRITICAL,
        min_samples=0,
        unit=check.unit,
        description="No more than 3 consecutive failed memory operations.",
    )


def _telemetry_freshness(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Freshness(),
        target=14400,
        comparison=Comparison.GT,
        severity=Severity.CRITICAL,
        min_samples=0,
        unit=check.unit,
        description="Telemetry keeps arriving: the newest event is recent.",
    )


def _recall_injection(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Coverage(
            obligations=(
                Obligation(
                    anchor=Anchor.EVENT,
                    required=s.events.recall_injected,
                    grace_ms=duration_ms(s.window.recall_grace),
                    triggers=s.events.recall_completed,
                    positive_results=True,
                    label="recall injection",
                    grace_key="recall_grace",
                    after="to inject results",
                ),
            ),
            requires_seen=s.events.recall_injected,
            breach_phrase="recalled results that were never injected",
        ),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.WARNING,
        min_samples=0,
        unit=check.unit,
        description="Recalls with results are injected into the session.",
    )


def _write_gate_drift(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Share(
            events=s.events.gate_decision, field="verdict", value="discard", noun="gate decisions"
        ),
        target=0.7,
        comparison=Comparison.GE,
        severity=Severity.WARNING,
        min_samples=20,
        unit=check.unit,
        description="The write gate does not discard most observations.",
    )


def _deviation_contract_params(s: Settings) -> DeviationContract:
    return DeviationContract(
        events=s.events.agent_deviation,
        allowed_keys=s.deviation.allowed_keys + s.deviation.envelope_keys,
        tipos=s.deviation.tipos,
        max_evidence=s.deviation.max_evidence,
        agents=s.deviation.agents,
    )


def _agent_deviation_contract(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=_deviation_contract_params(s),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.CRITICAL,
        min_samples=0,
        unit=check.unit,
        description="Deviation events carry only agente, tipo and evidence ids.",
    )


def _recall_before_response(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=Coverage(
            obligations=(
                Obligation(
                    anchor=Anchor.EVENT,
                    required=s.events.recall_any,
                    grace_ms=duration_ms(s.window.recall_grace),
                    triggers=s.events.human_message,
                    until=s.events.agent_response,
                    skip=PayloadMatch(s.events.trivial_field, s.events.trivial_kinds)
                    if s.events.trivial_kinds
                    else None,
                    label="recall before response",
                    grace_key="recall_grace",
                    after="after each non-trivial human message, or sooner at the response",
                ),
            ),
            noun="human messages",
            breach_phrase="had no recall before the response",
            counted=Counted.EVENTS,
        ),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.WARNING,
        min_samples=0,
        unit=check.unit,
        description="The agent recalls memory before answering a non-trivial human message.",
    )


def _agent_deviation_evidence(s: Settings, check: Builtin) -> CheckSpec:
    return CheckSpec(
        id=check.id,
        params=DeviationEvidence(contract=_deviation_contract_params(s)),
        target=0,
        comparison=Comparison.GT,
        severity=Severity.WARNING,
        min_samples=0,
        unit=check.unit,
        description="Evidence ids cited by deviation events exist in the source.",
    )


# The built-in checks, in report order: each declared once, its id and unit with its builder.
BUILTINS: tuple[Builtin, ...] = (
    Builtin("recall_coverage", Unit.COUNT, "coverage", _recall_coverage),
    Builtin("observe_coverage", Unit.COUNT, "coverage", _observe_coverage),
    Builtin("observe_failure_rate", Unit.RATIO, "outcome_rate", _observe_failure_rate),
    Builtin("recall_failure_rate", Unit.RATIO, "outcome_rate", _recall_failure_rate),
    Builtin("recall_latency_p95", Unit.MS, "quantile", _recall_latency_p95),
    Builtin("circuit_breaker", Unit.COUNT, "streak", _circuit_breaker),
    Builtin(FRESHNESS_CHECK_ID, Unit.S, "freshness", _telemetry_freshness),
    Builtin("recall_injection", Unit.COUNT, "coverage", _recall_injection),
    Builtin("write_gate_drift", Unit.RATIO, "share", _write_gate_drift),
    Builtin(
        "agent_deviation_contract", Unit.COUNT, "deviation_contract", _agent_deviation_contract
    ),
    Builtin("recall_before_response", Unit.COUNT, "coverage", _recall_before_response),
    Builtin(
        "agent_deviation_evidence", Unit.COUNT, "deviation_evidence", _agent_deviation_evidence
    ),
)


def configured_checks(settings: Settings) -> list[CheckSpec]:
    """Built-in checks (docs/spec.md section 5, in order) with `[checks.<id>]`, then custom ones.

    The settings were validated when they loaded (ids known and unique, custom
    windows within the lookback), so this cannot fail but on a registry that holds
    a built-in check without its builder, or a check no kind of it takes
    (RegistryError).
    """
    plugins = settings.plugins
    builtin = []
    for check in plugins.checks:
        if not isinstance(check, Builtin):
            raise RegistryError(f"built-in check {check.id!r} is registered without its builder")
        spec = check.build(settings, check)
        builtin.append(replace(spec, kind=kind_named(plugins, spec, check.kind)))
    custom = [spec_of(plugins, check) for check in settings.custom_checks]
    return [_override(spec, settings) for spec in builtin + custom]


def _override(spec: CheckSpec, settings: Settings) -> CheckSpec:
    override = settings.checks.get(spec.id)
    if override is None:
        return spec
    changes = {k: v for k, v in override.model_dump().items() if v is not None}
    if "target" in changes:  # as written ("5%", "3s"): in the check's unit
        changes["target"] = settings.target_of(spec.id, changes["target"])
    if "severity" in changes:
        changes["severity"] = Severity(changes["severity"])
    if "no_data" in changes:
        changes["no_data"] = NoDataPolicy(changes["no_data"])
    return replace(spec, **changes)
