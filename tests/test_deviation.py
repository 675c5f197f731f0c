"""The agent deviation contract and its evidence ids (docs/spec.md section 5)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks.base import Status
from tests.builder import T0, H, M, Scenario, evaluate
from watchdog.core.store import Store
from watchdog.report.text import render_json, render_text

AT = T0 + 4 * H
GOOD = {"agente": "po", "tipo": "laco", "evidenceEventIds": []}


def _contract(store: Store, payload: dict[str, Any] | str) -> tuple[Any, ...]:
    sc = Scenario()
    sc.session("s1").starts(T0 + H).deviates(T0 + H + M, payload)
    result = evaluate(store, sc, AT).checks["agent_deviation_contract"]
    return result.status, result.value, dict(result.evidence.kinds or ())


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({**GOOD, "nota": "the user is called Ana"}, "extra_key"),
        ({"tipo": "laco", "evidenceEventIds": []}, "agente_invalid"),
        ({**GOOD, "agente": ""}, "agente_invalid"),
        ({**GOOD, "agente": 7}, "agente_invalid"),
        ({**GOOD, "agente": "bob.agente@example.com <script>x</script>"}, "agente_invalid"),
        ({**GOOD, "agente": "ana maria"}, "agente_invalid"),
        ({**GOOD, "agente": "a" * 65}, "agente_invalid"),
        ({**GOOD, "agente": "po\u00e9"}, "agente_invalid"),
        ({**GOOD, "tipo": "desvio"}, "tipo_invalid"),
        ({"agente": "po", "evidenceEventIds": []}, "tipo_invalid"),
        ({**GOOD, "evidenceEventIds": "not a list"}, "evidence_not_array"),
        ({**GOOD, "evidenceEventIds": [1, 2]}, "evidence_not_array"),
        ({**GOOD, "evidenceEventIds": ["a", "a"]}, "evidence_duplicates"),
        ({**GOOD, "evidenceEventIds": [f"e{i}" for i in range(21)]}, "evidence_too_many"),
        ("not json at all", "payload_not_object"),
        ("[1, 2, 3]", "payload_not_object"),
    ],
)
def test_each_contract_breach_is_counted_by_kind(
    store: Store, payload: dict[str, Any] | str, kind: str
) -> None:
    """Each way of breaking the payload contract counts the event once, named by its kind."""
    status, value, kinds = _contract(store, payload)
    assert (status, value) == (Status.BREACHED, 1)
    assert kind in kinds


def test_conforming_payload_with_envelope_keys_passes(store: Store) -> None:
    """Envelope keys (session_id, ...) are allowed beside the allow list; 20 ids are fine."""
    ids = [f"e{i}" for i in range(20)]
    status, value, kinds = _contract(store, {**GOOD, "session_id": "s1", "evidenceEventIds": ids})
    assert (status, value, kinds) == (Status.OK, 0, {})


def test_evidence_as_json_text_counts_as_array(store: Store) -> None:
    """A string holding a JSON array of strings counts as an array (OTel maps store text)."""
    status, value, _ = _contract(store, {**GOOD, "evidenceEventIds": json.dumps(["a", "b"])})
    assert (status, value) == (Status.OK, 0)


def test_contract_evidence_never_carries_payload_values(store: Store) -> None:
    """Evidence names event ids and breach kinds, never a payload value."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).deviates(T0 + H + M, {**GOOD, "nota": "Ana Souza, CPF 123"})
    report = evaluate(store, sc, AT)
    text = json.dumps(report.to_json())
    assert "Ana Souza" not in text and "CPF" not in text
    assert report.checks["agent_deviation_contract"].evidence.events == (sc.events[-1].id,)


def test_missing_evidence_ids_are_found(store: Store) -> None:
    """A conforming deviation citing an id that exists nowhere within lookback is counted."""
    sc = Scenario()
    b = sc.session("s1").starts(T0 + H)
    cited = sc.events[-1].id
    b.deviates(T0 + H + M, {**GOOD, "evidenceEventIds": [cited]})
    b.deviates(T0 + H + 2 * M, {**GOOD, "evidenceEventIds": [cited, "ghost-1"]})
    missing_id = sc.events[-1].id
    b.deviates(T0 + H + 3 * M, {**GOOD, "nota": "x", "evidenceEventIds": ["ghost-2"]})
    result = evaluate(store, sc, AT).checks["agent_deviation_evidence"]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 2)
    assert result.evidence.events == (missing_id,)


def test_evidence_after_at_does_not_exist(store: Store) -> None:
    """An evidence id whose event is after `at` does not exist for this evaluation."""
    sc = Scenario()
    future = sc.event("tool.call.completed", AT + M, "s1")
    sc.session("s1").starts(T0 + H).deviates(T0 + H + M, {**GOOD, "evidenceEventIds": [future.id]})
    result = evaluate(store, sc, AT).checks["agent_deviation_evidence"]
    assert (result.status, result.value) == (Status.BREACHED, 1)


def test_deviations_are_aggregated_by_agente_and_tipo(store: Store) -> None:
    """The report counts conforming deviation events by agente x tipo; broken ones are not."""
    sc = Scenario()
    b = sc.session("s1").starts(T0 + H)
    for tipo in ("laco", "laco", "reparo_pelo_usuario"):
        b.deviates(T0 + 2 * H, {**GOOD, "tipo": tipo})
    b.deviates(T0 + 2 * H, {**GOOD, "agente": "arquiteto"})
    b.deviates(T0 + 2 * H, {**GOOD, "tipo": "unknown"})
    report = evaluate(store, sc, AT)
    rows = report.to_json()["deviations"]["by_agent_and_type"]
    assert rows == [
        {"agente": "po", "tipo": "laco", "count": 2},
        {"agente": "arquiteto", "tipo": "laco", "count": 1},
        {"agente": "po", "tipo": "reparo_pelo_usuario", "count": 1},
    ]


def test_an_invalid_agente_is_never_aggregated_or_shown(store: Store) -> None:
    """A payload value that is no agent name stays out of the aggregation, text and JSON."""
    hostile = "bob.agente@example.com <script>x</script>"
    sc = Scenario()
    b = sc.session("s1").starts(T0 + H)
    b.deviates(T0 + 2 * H, GOOD)
    b.deviates(T0 + 2 * H, {**GOOD, "agente": hostile})
    report = evaluate(store, sc, AT)
    assert report.to_json()["deviations"]["by_agent_and_type"] == [
        {"agente": "po", "tipo": "laco", "count": 1}
    ]
    shown = render_text(report) + render_json(report)
    assert "bob.agente" not in shown and "<script>" not in shown
    assert report.checks["agent_deviation_contract"].value == 1


def test_a_configured_agent_list_is_the_vocabulary(store: Store) -> None:
    """With deviation.agents set, only those names conform."""
    sc = Scenario()
    b = sc.session("s1").starts(T0 + H)
    b.deviates(T0 + 2 * H, GOOD)
    b.deviates(T0 + 2 * H, {**GOOD, "agente": "dev"})
    report = evaluate(store, sc, AT, {"deviation": {"agents": ["po", "arquiteto"]}})
    contract = report.checks["agent_deviation_contract"]
    assert (contract.value, dict(contract.evidence.kinds or ())) == (1, {"agente_invalid": 1})
    assert [d.agente for d in report.deviations] == ["po"]
