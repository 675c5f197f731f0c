"""Deviation evidence: conforming deviation events in W citing an id that exists nowhere.

The contract's events that conform (those that break it are the contract
check's) cite evidence ids; each is looked up among every event of the
lookback (docs/checks.md#each-check-in-a-sentence). The lookup filters on the
preset's cheap `event_id_hint` before `event_id`. Triage counts each citing
event once, however many missing ids it cites.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checks.base import CheckSpec, KindParams
from checks.evidence import Evidence
from checks.kinds.base import Described, Flag, Kind
from checks.kinds.deviation_contract import (
    DeviationContract,
    breaches,
    carried_triage,
    cited,
    classified,
)
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE
from checks.scans.window import LISTED
from checks.verdict import judge


@dataclass(frozen=True)
class DeviationEvidence(KindParams):
    """Conforming deviation events in W citing an evidence id that exists nowhere."""

    contract: DeviationContract


# A citing event and its value of one dimension (the triage counts each event once).
_VALUED = "Tuple(id String, value String)"


class DeviationEvidenceKind(Kind[DeviationEvidence]):
    name = "deviation_evidence"
    params = DeviationEvidence

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        dims = plans.dims

        def query(ctx: Context) -> tuple[str, Mapping[str, Any]]:
            carried = "".join(f", edim_{d}" for d in dims or ())
            by_dims = "".join(
                f",\n  groupUniqArrayIf(CAST((event_id, edim_{d}) AS {_VALUED}), missing)"
                f" AS tr_u_{d}, arrayReduce('sumMap', arrayMap(x -> [x.value], tr_u_{d}),"
                f" arrayMap(x -> [toUInt64(1)], tr_u_{d})) AS tr_by_{d}"
                for d in dims or ()
            )
            # `conforming` gives every cited id (an empty list gives one row, pos 0); `cited`
            # the ids to look up, each found in a window when it has a row in its lookback
            # (grouped by id on the shards: each sends back the ids it holds, not its rows).
            w = ctx.windowing
            existing = ctx.source.select(
                "event_id, _w" if w.key else "event_id",
                where="(event_id_hint = '' OR event_id_hint IN cited) AND event_id IN cited",
                group=w.keys("event_id"),
                join=w.reading("t"),
            )
            sql = f"""
WITH conforming AS (
  SELECT {w.key}event_id, t, ids{carried}
  FROM ({classified(ctx.source, dims or (), w)})
  WHERE length(kinds) = 0
),
cited AS (SELECT arrayJoin(ids) FROM conforming)
SELECT
  {w.key}uniqExact(event_id) AS n,
  uniqExactIf(event_id, missing) AS citing_missing,
  groupArraySortedIf({EVIDENCE})(CAST((t, event_id) AS {LISTED}), missing) AS oldest,
  uniqExactIf(cited_id, missing) AS missing_ids{by_dims}
FROM (
  SELECT {w.key}event_id, t, cited_id{carried}, pos > 0 AND {w.keyed("cited_id")} NOT IN (
    {existing}
  ) AS missing
  FROM conforming LEFT ARRAY JOIN ids AS cited_id, arrayEnumerate(ids) AS pos
)
{w.group()}
"""
            return sql, p.contract.params()

        plans.own(spec, query)

        def read(row: Row, ctx: Context) -> Judged:
            n, value = int(row["n"]), int(row["citing_missing"])
            oldest = tuple(dict.fromkeys(e["id"] for e in row["oldest"]))
            result = judge(
                spec,
                float(value),
                n,
                f"{value} of {n} conforming deviation events cite evidence ids that do not exist",
                Evidence(events=oldest, missing_ids=int(row["missing_ids"])),
                no_data=n == 0,
                no_data_summary="no conforming deviation event in the window",
            )
            return Judged(result, carried_triage(result.status, value, row, dims))

        return read

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        """A conforming deviation event citing an evidence id that exists nowhere."""
        p = self.of(spec).contract
        words = "'cites evidence ids that exist nowhere in the lookback'"
        return Flag(p.events, f"empty({breaches('payload')})", words, p.params(), cited("payload"))

    def describe(self, params: DeviationEvidence) -> Described:
        return params.contract.described()

    def payload_names(self, params: DeviationEvidence) -> tuple[str, ...]:
        return params.contract.events


KIND = DeviationEvidenceKind()
