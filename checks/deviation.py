"""The agent deviation contract: payload shape, evidence ids, and the aggregation.

A deviation event's payload may hold only `agente`, `tipo` and
`evidenceEventIds` (plus envelope keys); `tipo` comes from a closed
vocabulary; evidence is an array of at most 20 distinct strings (a string
holding a JSON array counts as one, as OTel attribute maps store arrays as
text). The classification runs in ClickHouse; Python receives counts per
breach kind and event ids, never a payload value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checks.base import CheckResult, DeviationCount, Status, Window
from checks.breakdown import Triage, grouped
from checks.evidence import Evidence
from checks.kinds import CheckSpec, DeviationContract
from checks.sessions import EVIDENCE
from checks.sources import CompiledSource
from checks.verdict import judge
from watchdog.core.store import Store

# Breach kinds, in the order reports list them.
KINDS = (
    "payload_not_object",
    "extra_key",
    "agente_invalid",
    "tipo_invalid",
    "evidence_not_array",
    "evidence_duplicates",
    "evidence_too_many",
)


def classified(source: CompiledSource, dims: Sequence[str] = ()) -> str:
    """The deviation events of W, one row per event id, with their breach kinds.

    With `dims`, each event also carries `edim_<name>`: the dimension of any
    of its rows (the source must then be read `with_dims`).
    """
    carried = "".join(f", edim_{d}" for d in dims)
    first = "".join(f", any(dim_{d}) AS edim_{d}" for d in dims)
    return f"""
SELECT
  event_id, t, agente, tipo, ids{carried},
  arrayFilter(k -> k != '', [
    if(NOT is_object, 'payload_not_object', ''),
    if(is_object AND arrayExists(k -> NOT has({{dev_allowed:Array(String)}}, k),
        JSONExtractKeys(payload)), 'extra_key', ''),
    if(is_object AND NOT (JSONType(payload, 'agente') = 'String'
        AND if(empty({{dev_agents:Array(String)}}), match(agente, {{dev_agent_name:String}}),
               has({{dev_agents:Array(String)}}, agente))), 'agente_invalid', ''),
    if(is_object AND NOT (JSONType(payload, 'tipo') = 'String'
        AND has({{dev_tipos:Array(String)}}, tipo)), 'tipo_invalid', ''),
    if(is_object AND NOT ids_ok, 'evidence_not_array', ''),
    if(ids_ok AND length(arrayDistinct(ids)) != length(ids), 'evidence_duplicates', ''),
    if(ids_ok AND length(ids) > {{dev_max:UInt32}}, 'evidence_too_many', '')
  ]) AS kinds
FROM (
  SELECT
    event_id, t, payload{carried},
    isValidJSON(payload) AND JSONType(payload) = 'Object' AS is_object,
    if(is_object, JSONExtractString(payload, 'agente'), '') AS agente,
    if(is_object, JSONExtractString(payload, 'tipo'), '') AS tipo,
    multiIf(NOT is_object, '',
            JSONType(payload, 'evidenceEventIds') = 'Array',
            JSONExtractRaw(payload, 'evidenceEventIds'),
            JSONType(payload, 'evidenceEventIds') = 'String',
            JSONExtractString(payload, 'evidenceEventIds'), '') AS ids_json,
    isValidJSON(ids_json) AND JSONType(ids_json) = 'Array'
      AND arrayAll(x -> JSONType(x) = 'String', JSONExtractArrayRaw(ids_json)) AS ids_ok,
    if(ids_ok, arrayMap(x -> JSONExtractString(x), JSONExtractArrayRaw(ids_json)), [])
      AS ids
  FROM (
    SELECT event_id, any(t) AS t, any(payload) AS payload{first}
    FROM (SELECT * FROM {source.events()}
          WHERE name IN {{dev_names:Array(String)}} AND t >= {{ws_ms:Int64}})
    GROUP BY event_id
  )
)"""


# What an `agente` must be when no agent list is configured (docs/spec.md section 5).
AGENT_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"


def contract_params(p: DeviationContract) -> dict[str, Any]:
    """The contract's bound parameters (`classified` uses them)."""
    return {
        "dev_names": list(p.events),
        "dev_allowed": list(p.allowed_keys),
        "dev_tipos": list(p.tipos),
        "dev_max": p.max_evidence,
        "dev_agents": list(p.agents),
        "dev_agent_name": AGENT_NAME,
    }


def _params(source: CompiledSource, window: Window, p: DeviationContract) -> dict[str, Any]:
    return {**source.params, **window.params(), **contract_params(p)}


@dataclass(frozen=True)
class DeviationFindings:
    contract: CheckResult
    aggregation: tuple[DeviationCount, ...]
    triage: Triage | None = None  # with dims, when the contract breached


def _by_dims(dims: Sequence[str], failing: str) -> str:
    """SQL: the failing events counted by each dimension (`checks.breakdown.grouped` reads it)."""
    return "".join(
        f",\n  sumMapIf(([edim_{d}], [toUInt64(1)]), {failing}) AS tr_by_{d}" for d in dims
    )


def _triage(
    result: CheckResult, items: int, row: dict[str, Any], dims: Sequence[str] | None
) -> Triage | None:
    if dims is None or result.status is not Status.BREACHED:
        return None
    return grouped(items, {d: row[f"tr_by_{d}"] for d in dims}, dims)


def contract(
    store: Store,
    source: CompiledSource,
    window: Window,
    spec: CheckSpec,
    p: DeviationContract,
    dims: Sequence[str] | None = None,
) -> DeviationFindings:
    """Deviation events in W that break the contract, and the conforming ones by agente x tipo.

    With `dims`, the breaking events' triage breakdown rides along.
    """
    counts = ",\n  ".join(f"countIf(has(kinds, '{kind}')) AS {kind}" for kind in KINDS)
    # The aggregation rides along: the conforming events' (agente, tipo) sorted, split
    # where the pair changes, one (agente, tipo, count) per chunk, biggest first.
    sql = f"""
SELECT * EXCEPT (pairs, same_pair) FROM (
SELECT
  count() AS n,
  countIf(length(kinds) > 0) AS broken{_by_dims(dims or (), "length(kinds) > 0")},
  groupArraySortedIf({EVIDENCE})((t, event_id), length(kinds) > 0) AS oldest,
  {counts},
  arraySort(groupArrayIf((agente, tipo), length(kinds) = 0)) AS pairs,
  arraySplit((x, previous) -> x != previous, pairs,
             arrayPopBack(arrayPushFront(pairs, pairs[1]))) AS same_pair,
  arraySort(x -> (-x.3, x.1, x.2),
            arrayMap(c -> (c[1].1, c[1].2, length(c)), same_pair)) AS aggregation
FROM ({classified(source if dims is None else source.with_dims(), dims or ())})
)
"""
    params = _params(source, window, p)
    row = store.aggregate(sql, params)
    n, broken = int(row["n"]), int(row["broken"])
    kinds = {kind: int(row[kind]) for kind in KINDS if row[kind]}
    evidence = Evidence(events=tuple(eid for _, eid in row["oldest"]), kinds=tuple(kinds.items()))
    summary = f"{broken} of {n} deviation events break the payload contract"
    if kinds:
        summary += " (" + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in kinds.items()) + ")"
    result = judge(
        spec,
        float(broken),
        n,
        summary,
        evidence,
        no_data=n == 0,
        no_data_summary="no deviation event in the window",
    )
    aggregation = tuple(DeviationCount(str(a), str(t), int(c)) for a, t, c in row["aggregation"])
    return DeviationFindings(result, aggregation, _triage(result, broken, row, dims))


def evidence(
    store: Store,
    source: CompiledSource,
    window: Window,
    spec: CheckSpec,
    p: DeviationContract,
    dims: Sequence[str] | None = None,
) -> tuple[CheckResult, Triage | None]:
    """Conforming deviation events in W citing an evidence id found nowhere within lookback.

    With `dims`, the citing events' triage breakdown rides along (each event
    counted once, however many missing ids it cites).
    """
    carried = "".join(f", edim_{d}" for d in dims or ())
    by_dims = "".join(
        f",\n  groupUniqArrayIf((event_id, edim_{d}), missing) AS tr_u_{d},"
        f" arrayReduce('sumMap', arrayMap(x -> [x.2], tr_u_{d}),"
        f" arrayMap(x -> [toUInt64(1)], tr_u_{d})) AS tr_by_{d}"
        for d in dims or ()
    )
    # `conforming` gives every cited id (an empty list gives one row, pos 0); `cited` the
    # ids to look up. The lookup filters on the cheap `event_id_hint` before `event_id`.
    sql = f"""
WITH conforming AS (
  SELECT event_id, t, ids{carried}
  FROM ({classified(source if dims is None else source.with_dims(), dims or ())})
  WHERE length(kinds) = 0
),
cited AS (SELECT arrayJoin(ids) FROM conforming)
SELECT
  uniqExact(event_id) AS n,
  uniqExactIf(event_id, missing) AS citing_missing,
  groupArraySortedIf({EVIDENCE})((t, event_id), missing) AS oldest,
  uniqExactIf(cited_id, missing) AS missing_ids{by_dims}
FROM (
  SELECT event_id, t, cited_id{carried}, pos > 0 AND cited_id NOT IN (
    SELECT event_id FROM {source.events()}
    WHERE (event_id_hint = '' OR event_id_hint IN cited) AND event_id IN cited
  ) AS missing
  FROM conforming LEFT ARRAY JOIN ids AS cited_id, arrayEnumerate(ids) AS pos
)
"""
    row = store.aggregate(sql, _params(source, window, p))
    n, value = int(row["n"]), int(row["citing_missing"])
    oldest = tuple(dict.fromkeys(eid for _, eid in row["oldest"]))
    summary = f"{value} of {n} conforming deviation events cite evidence ids that do not exist"
    result = judge(
        spec,
        float(value),
        n,
        summary,
        Evidence(events=oldest, missing_ids=int(row["missing_ids"])),
        no_data=n == 0,
        no_data_summary="no conforming deviation event in the window",
    )
    return result, _triage(result, value, row, dims)
