"""The agent deviation contract: deviation events in W whose payload breaks it.

A deviation event's payload may hold only `agente`, `tipo` and
`evidenceEventIds` (plus envelope keys); `tipo` comes from a closed
vocabulary; evidence is an array of at most 20 distinct strings, a string
holding a JSON array counting as one, as OTel attribute maps store arrays as
text (docs/checks.md#each-check-in-a-sentence). The classification
(`classified`) runs in ClickHouse; Python receives counts per breach kind and
event ids, never a payload value. The conforming events, counted by agente x
tipo, ride along as the report's aggregation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checks.base import CheckSpec, DeviationCount, KindParams, Status
from checks.breakdown import Triage, grouped
from checks.evidence import Evidence
from checks.kinds.base import Flag, Kind
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE
from checks.scans.window import LISTED
from checks.scans.windows import ONE, Windowing
from checks.sources import CompiledSource
from checks.verdict import judge

# The ways a payload breaks the contract, in the order reports list them.
BREACH_KINDS = (
    "payload_not_object",
    "extra_key",
    "agente_invalid",
    "tipo_invalid",
    "evidence_not_array",
    "evidence_duplicates",
    "evidence_too_many",
)

# A conforming event's pair, and the pairs counted (the report's aggregation).
_PAIR = "Tuple(agente String, tipo String)"
_COUNTED = "Tuple(agente String, tipo String, count UInt64)"

# What an `agente` must be when no agent list is configured (docs/spec.md section 5).
AGENT_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"


@dataclass(frozen=True)
class DeviationContract(KindParams):
    """Deviation events in W that break the payload contract."""

    events: tuple[str, ...]
    allowed_keys: tuple[str, ...]
    tipos: tuple[str, ...]
    max_evidence: int
    agents: tuple[str, ...] = ()  # the agent names allowed; empty: any name of AGENT_NAME

    def params(self) -> dict[str, Any]:
        """The contract's bound parameters (`classified` uses them)."""
        return {
            "dev_names": list(self.events),
            "dev_allowed": list(self.allowed_keys),
            "dev_tipos": list(self.tipos),
            "dev_max": self.max_evidence,
            "dev_agents": list(self.agents),
            "dev_agent_name": AGENT_NAME,
        }

    def described(self) -> list[tuple[str, str]]:
        return [("tipos", ", ".join(self.tipos)), ("max evidence ids", str(self.max_evidence))]


def _is_object(p: str) -> str:
    return f"(isValidJSON({p}) AND JSONType({p}) = 'Object')"


def _field(p: str, key: str) -> str:
    """A string field of the payload ('' when the payload is no object)."""
    return f"if({_is_object(p)}, JSONExtractString({p}, '{key}'), '')"


def _ids_json(p: str) -> str:
    """The evidence ids as JSON text: the array, or a string holding one (OTel maps)."""
    return (
        f"multiIf(NOT {_is_object(p)}, '',"
        f" JSONType({p}, 'evidenceEventIds') = 'Array', JSONExtractRaw({p}, 'evidenceEventIds'),"
        f" JSONType({p}, 'evidenceEventIds') = 'String',"
        f" JSONExtractString({p}, 'evidenceEventIds'), '')"
    )


def _ids_ok(p: str) -> str:
    ids = _ids_json(p)
    return (
        f"(isValidJSON({ids}) AND JSONType({ids}) = 'Array'"
        f" AND arrayAll(x -> JSONType(x) = 'String', JSONExtractArrayRaw({ids})))"
    )


def cited(p: str) -> str:
    """SQL: the evidence ids the payload `p` cites (none when they are no array of strings)."""
    return (
        f"if({_ids_ok(p)}, arrayMap(x -> JSONExtractString(x), JSONExtractArrayRaw({_ids_json(p)})),"
        " CAST([] AS Array(String)))"
    )


def breaches(p: str) -> str:
    """SQL: the ways the payload `p` breaks the contract (BREACH_KINDS; empty: it conforms).

    The contract's one rule; its parameters are `DeviationContract.params()`.
    Repeated parts of it are computed once (ClickHouse evaluates an
    expression once per block, however often it appears).
    """
    obj, ok, ids = _is_object(p), _ids_ok(p), cited(p)
    agente, tipo = _field(p, "agente"), _field(p, "tipo")
    return f"""arrayFilter(k -> k != '', [
    if(NOT {obj}, 'payload_not_object', ''),
    if({obj} AND arrayExists(k -> NOT has({{dev_allowed:Array(String)}}, k),
        JSONExtractKeys({p})), 'extra_key', ''),
    if({obj} AND NOT (JSONType({p}, 'agente') = 'String'
        AND if(empty({{dev_agents:Array(String)}}), match({agente}, {{dev_agent_name:String}}),
               has({{dev_agents:Array(String)}}, {agente}))), 'agente_invalid', ''),
    if({obj} AND NOT (JSONType({p}, 'tipo') = 'String'
        AND has({{dev_tipos:Array(String)}}, {tipo})), 'tipo_invalid', ''),
    if({obj} AND NOT {ok}, 'evidence_not_array', ''),
    if({ok} AND length(arrayDistinct({ids})) != length({ids}), 'evidence_duplicates', ''),
    if({ok} AND length({ids}) > {{dev_max:UInt32}}, 'evidence_too_many', '')
  ])"""


def classified(source: CompiledSource, dims: Sequence[str] = (), windowing: Windowing = ONE) -> str:
    """The deviation events of W, one row per event id, with their breach kinds.

    With `dims`, each event also carries `edim_<name>`: the dimension of any
    of its rows (read from the source with its dimensions). With many
    windows, one row per event and window holding it (`_w`).
    """
    carried = "".join(f", edim_{d}" for d in dims)
    first = "".join(f", any(dim_{d}) AS edim_{d}" for d in dims)
    key, p = windowing.key, "_dev_payload"
    events = source.select(
        f"{key}event_id, any(t) AS _dev_t, any(payload) AS _dev_payload{first}",
        where="name IN {dev_names:Array(String)} AND t >= {ws_ms:Int64}",
        group=windowing.keys("event_id"),
        dims=bool(dims),
        join=windowing.holding("t"),
    )
    return f"""
SELECT
  {key}event_id, _dev_t AS t{carried},
  {_field(p, "agente")} AS agente,
  {_field(p, "tipo")} AS tipo,
  {cited(p)} AS ids,
  {breaches(p)} AS kinds
FROM ({events}
)"""


def carried_triage(
    result_status: Status, items: int, row: Row, dims: Sequence[str] | None
) -> Triage | None:
    """The breakdown a deviation query carried (`tr_by_<dim>` columns), when breached."""
    if dims is None or result_status is not Status.BREACHED:
        return None
    return grouped(items, {d: row[f"tr_by_{d}"] for d in dims}, dims)


class DeviationContractKind(Kind[DeviationContract]):
    name = "deviation_contract"
    params = DeviationContract

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        dims = plans.dims

        def query(ctx: Context) -> tuple[str, Mapping[str, Any]]:
            counts = ",\n  ".join(f"countIf(has(kinds, '{k}')) AS {k}" for k in BREACH_KINDS)
            broken = "length(kinds) > 0"
            by_dims = "".join(
                f",\n  sumMapIf(([edim_{d}], [toUInt64(1)]), {broken}) AS tr_by_{d}"
                for d in dims or ()
            )
            # The aggregation rides along: the conforming events' (agente, tipo) sorted, split
            # where the pair changes, one (agente, tipo, count) per chunk, biggest first.
            w = ctx.windowing
            sql = f"""
SELECT * EXCEPT (pairs, same_pair) FROM (
SELECT
  {w.key}count() AS n,
  countIf({broken}) AS broken{by_dims},
  groupArraySortedIf({EVIDENCE})(CAST((t, event_id) AS {LISTED}), {broken}) AS oldest,
  {counts},
  arraySort(groupArrayIf(CAST((agente, tipo) AS {_PAIR}), length(kinds) = 0)) AS pairs,
  arraySplit((x, previous) -> x != previous, pairs,
             arrayPopBack(arrayPushFront(pairs, pairs[1]))) AS same_pair,
  arraySort(x -> (-x.count, x.agente, x.tipo),
            arrayMap(c -> CAST((c[1].agente, c[1].tipo, length(c)) AS {_COUNTED}), same_pair))
    AS aggregation
FROM ({classified(ctx.source, dims or (), w)})
{w.group()}
)
"""
            return sql, p.params()

        plans.own(spec, query)

        def read(row: Row, ctx: Context) -> Judged:
            n, broken = int(row["n"]), int(row["broken"])
            kinds = {kind: int(row[kind]) for kind in BREACH_KINDS if row[kind]}
            evidence = Evidence(
                events=tuple(e["id"] for e in row["oldest"]), kinds=tuple(kinds.items())
            )
            summary = f"{broken} of {n} deviation events break the payload contract"
            if kinds:
                summary += (
                    " (" + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in kinds.items()) + ")"
                )
            result = judge(
                spec,
                float(broken),
                n,
                summary,
                evidence,
                no_data=n == 0,
                no_data_summary="no deviation event in the window",
            )
            aggregation = tuple(
                DeviationCount(str(x["agente"]), str(x["tipo"]), int(x["count"]))
                for x in row["aggregation"]
            )
            triage = carried_triage(result.status, broken, row, dims)
            return Judged(result, triage, deviations=aggregation)

        return read

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        """A deviation event that breaks the contract, and how (its breach kinds)."""
        p = self.of(spec)
        kinds = breaches("payload")
        words = f"concat('breaks the contract: ', arrayStringConcat({kinds}, ', '))"
        return Flag(p.events, f"notEmpty({kinds})", words, p.params())

    def describe(self, params: DeviationContract) -> list[tuple[str, str]]:
        return params.described()

    def payload_names(self, params: DeviationContract) -> tuple[str, ...]:
        return params.events


KIND = DeviationContractKind()
