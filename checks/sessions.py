"""The shared per-session aggregation: obligations, outcome counts, freshness.

One query reads the normalized events of `[at - lookback, at)` once, groups
them by session, and judges every obligation (docs/spec.md section 4) of every
coverage and outcome-rate check over the same per-session arrays. Python gets
one row back: per check, the counts and at most 20 evidence items.

Event names are mapped to a bit mask once per row (`transform` over bound
arrays): bit k is set when the name belongs to name set k. Times are epoch
milliseconds (`t`); windows, graces and idle timeouts are bound parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.base import CheckResult, Status, Window
from checks.breakdown import Triage
from checks.evidence import Evidence
from checks.kinds import (
    Anchor,
    CheckSpec,
    Counted,
    Coverage,
    Freshness,
    Obligation,
    OutcomeRate,
    PayloadMatch,
)
from checks.session_triage import coverage_triage
from checks.sources import CompiledSource
from checks.verdict import judge, percent
from watchdog.core.durations import human_duration
from watchdog.core.store import Store
from watchdog.core.times import from_ms

EVIDENCE = 20

# Per session, its role events: (t, mask, event id, has results). The result count is
# parsed for role events only (`if` evaluates its branch lazily). `_mr` is the mask's
# bits of the sets kept here: a side set's events have arrays of their own.
ROLES = (
    "groupArrayIf((t, _m, event_id, if(_mr != 0, ifNull(result_count, 0) > 0, false)), _mr != 0)"
)


@dataclass
class NameSets:
    """Assigns one bit to each distinct tuple of event names (and payload filter).

    A set with a `skip` filter is its own set: an event named in it whose
    payload matches the filter does not count as a member (a trivial human
    message creates no obligation), while it still does for a plain set of
    the same names. A `side` set's events are kept in a per-session array of
    their own (see SessionQueryBuilder), so that busy names (every human
    message, every response) do not lengthen the array of memory events
    every other figure scans; each side set has its own arrays, of times or
    of (time, event id).
    """

    bits: dict[tuple[tuple[str, ...], PayloadMatch | None, bool], int] = field(default_factory=dict)

    def bit(
        self, names: Sequence[str], skip: PayloadMatch | None = None, side: bool = False
    ) -> int:
        key = (tuple(sorted(set(names))), skip, side)
        if key not in self.bits:
            if len(self.bits) == 64:
                raise ValueError("more than 64 distinct event-name sets in one query")
            self.bits[key] = len(self.bits)
        return self.bits[key]

    def is_side(self, bit: int) -> bool:
        return any(side for (_, _, side), b in self.bits.items() if b == bit)

    def side_mask(self) -> int:
        """The bits of the side sets (0: there are none)."""
        return sum(1 << bit for (_, _, side), bit in self.bits.items() if side)

    def _skips(self) -> dict[PayloadMatch, int]:
        """Each distinct payload filter, and the mask of the sets it applies to."""
        masks: dict[PayloadMatch, int] = {}
        for (_, skip, _), bit in self.bits.items():
            if skip is not None:
                masks[skip] = masks.get(skip, 0) | (1 << bit)
        return masks

    def params(self) -> dict[str, Any]:
        """`role_names` and `role_masks` (each name with the mask of the sets it is in), filters."""
        masks: dict[str, int] = {}
        for (names, _, _), bit in self.bits.items():
            for name in names:
                masks[name] = masks.get(name, 0) | (1 << bit)
        params: dict[str, Any] = {"role_names": list(masks), "role_masks": list(masks.values())}
        if self.side_mask():
            params["side_mask"] = self.side_mask()
        for i, (skip, mask) in enumerate(self._skips().items()):
            params.update(
                {
                    f"skip{i}_mask": mask,
                    f"skip{i}_field": skip.field,
                    f"skip{i}_values": list(skip.values),
                }
            )
        return params

    def mask_sql(self) -> str:
        """SQL: the event's masks, `_m` (all its sets) and `_mr` (its sets but the side sets).

        `_m` is the mask of its name, less the bits of filtered sets its payload
        excludes it from. The payload is parsed only for events in a filtered set (`and` evaluates
        its second argument only where the first holds).
        """
        mask = "_m0"
        for i in range(len(self._skips())):
            bits = f"{{skip{i}_mask:UInt64}}"
            excluded = (
                f"bitAnd(_m0, {bits}) != 0 AND JSONExtractString(payload, {{skip{i}_field:String}})"
                f" IN {{skip{i}_values:Array(String)}}"
            )
            mask = f"bitAnd({mask}, bitNot(if({excluded}, {bits}, toUInt64(0))))"
        roles = "bitAnd(_m, bitNot({side_mask:UInt64}))" if self.side_mask() else "_m"
        return (
            "transform(name, {role_names:Array(String)}, {role_masks:Array(UInt64)}, toUInt64(0))"
            f" AS _m0, {mask} AS _m, {roles} AS _mr"
        )


@dataclass
class SessionQueryBuilder:
    """Collects the SELECT items of the three levels of the session query."""

    sets: NameSets = field(default_factory=NameSets)
    # alias -> per-session aggregate; `_roles` (the session's role events) is always there.
    inner: dict[str, str] = field(default_factory=lambda: {"_roles": ROLES})
    outer: dict[str, str] = field(default_factory=dict)  # alias -> per-session expression
    final: dict[str, str] = field(default_factory=dict)  # alias -> total over sessions
    params: dict[str, Any] = field(default_factory=dict)

    def _roles(self, k: int, extra: str = "") -> str:
        """Per session: its role events named in set `k` (and matching `extra`), from `_roles`.

        Every role event of a session is kept once per row in one array of
        (t, mask, event id, has results), and each per-session figure below is
        an array expression over it: one aggregate state per session instead
        of one per figure (the same results; at 20M events, less than half
        the memory).
        """
        return f"arrayFilter(x -> bitTest(x.2, {k}){extra}, _roles)"

    def times(self, names: Sequence[str], side: bool = False) -> str:
        """Per session: the times of its events named in `names`."""
        k = self.sets.bit(names, side=side)
        alias = f"times_{k}"
        if side:
            self.inner[f"_side_times_{k}"] = f"groupArrayIf(t, bitTest(_m, {k}))"
            self.outer[alias] = f"if(session_id != '', _side_times_{k}, [])"
        else:
            self.outer[alias] = f"if(session_id != '', arrayMap(x -> x.1, {self._roles(k)}), [])"
        return alias

    def anchors(
        self,
        names: Sequence[str],
        positive: bool,
        skip: PayloadMatch | None = None,
        side: bool = False,
        when: str = "",
        tag: str = "",
    ) -> str:
        """Per session: (time, event id) of each trigger event, duplicates counted once.

        `when` (SQL over the trigger's time `$t`) keeps only the triggers that
        may be due: filtering before `arrayDistinct` spares the hashing of the
        many that cannot be (most of the lookback lies before the window).
        """
        k = self.sets.bit(names, skip, side)
        alias = f"anchors_{k}{'_pos' if positive else ''}{'_' + tag if tag else ''}"
        if side:
            self.inner[f"_side_events_{k}"] = f"groupArrayIf((t, event_id), bitTest(_m, {k}))"
            picked = f"_side_events_{k}"
            if when:
                picked = f"arrayFilter(x -> {when.replace('$t', 'x.1')}, {picked})"
            self.outer[alias] = f"if(session_id != '', arrayDistinct({picked}), [])"
            return alias
        extra = (" AND x.4" if positive else "") + (
            f" AND {when.replace('$t', 'x.1')}" if when else ""
        )
        events = self._roles(k, extra)
        self.outer[alias] = (
            f"if(session_id != '', arrayDistinct(arrayMap(x -> (x.1, x.3), {events})), [])"
        )
        return alias

    def first_of(self, names: Sequence[str]) -> tuple[str, str]:
        """Per session: whether any of `names` happened, and the first time it did."""
        k = self.sets.bit(names)
        self.outer[f"has_{k}"] = f"notEmpty({self._roles(k)})"
        self.outer[f"first_{k}"] = f"arrayMin(arrayMap(x -> x.1, {self._roles(k)}))"
        return f"has_{k}", f"first_{k}"

    def count_in_window(self, names: Sequence[str]) -> str:
        """Per session (sessionless events included): distinct events of `names` in W."""
        k = self.sets.bit(names)
        alias = f"count_{k}"
        events = self._roles(k, " AND x.1 >= {ws_ms:Int64}")
        self.outer[alias] = f"length(arrayDistinct(arrayMap(x -> x.3, {events})))"
        return alias

    def oldest_in_window(self, names: Sequence[str]) -> str:
        """Per session: the oldest 20 (time, event id) of `names` in W."""
        k = self.sets.bit(names)
        alias = f"oldest_{k}"
        events = self._roles(k, " AND x.1 >= {ws_ms:Int64}")
        # Distinct first: a duplicated row must not take two of the 20 places.
        self.outer[alias] = (
            f"arraySlice(arraySort(arrayDistinct(arrayMap(x -> (x.1, x.3), {events}))),"
            f" 1, {EVIDENCE})"
        )
        return alias

    def seen(self, names: Sequence[str]) -> str:
        """Per session: how many events of `names` exist within lookback."""
        k = self.sets.bit(names)
        alias = f"seen_{k}"
        self.outer[alias] = f"length({self._roles(k)})"
        self.outer[f"newest_{k}"] = f"arrayMax(arrayMap(x -> x.1, {self._roles(k)}))"
        return alias

    def obligation(self, tag: str, ob: Obligation) -> tuple[str, str, str | None]:
        """Per session: how many obligations are due in W and how many of those are unmet.

        Returns the aliases (due, unmet, misses) where `misses` lists the
        (time, event id) of unmet trigger events, for Anchor.EVENT.
        """
        met_by = self.times(ob.required)
        g, lead = f"{{{tag}_grace:Int64}}", f"{{{tag}_lead:Int64}}"
        self.params[f"{tag}_grace"] = ob.grace_ms
        self.params[f"{tag}_lead"] = ob.lead_ms
        in_w = "{d} >= {{ws_ms:Int64}} AND {d} < {{at_ms:Int64}}"
        due, unmet = f"{tag}_due", f"{tag}_unmet"
        if ob.anchor is Anchor.START:
            deadline = f"first_seen + {g}"
            self.outer[due] = f"toUInt32({in_w.format(d=deadline)})"
            self.outer[unmet] = (
                f"toUInt32({due} AND NOT arrayExists("
                f"x -> x >= first_seen - {lead} AND x <= {deadline}, {met_by}))"
            )
            return due, unmet, None
        if ob.anchor is Anchor.END:
            has_end, end = self.first_of(ob.ends)
            idle = f"{{{tag}_idle:Int64}}"
            self.params[f"{tag}_idle"] = ob.idle_ms
            # An end event sets the deadline at end + grace; without one the
            # session ends silently at last_seen, judged once idle for idle_timeout.
            deadline = f"{tag}_deadline"
            self.outer[deadline] = f"if({has_end}, {end} + {g}, last_seen + {idle})"
            self.outer[due] = f"toUInt32({in_w.format(d=deadline)})"
            self.outer[unmet] = (
                f"toUInt32({due} AND NOT if({has_end},"
                f" arrayExists(x -> x >= {end} - {lead} AND x <= {end} + {g}, {met_by}),"
                f" arrayExists(x -> x >= last_seen - {lead} AND x <= last_seen, {met_by})))"
            )
            return due, unmet, None
        # An obligation closed by `until` (a response to each human message) reads
        # conversation events: they are kept aside from the memory events.
        side = bool(ob.until)
        # A trigger's deadline is at most its time + grace (sooner with `until`), and
        # every trigger is before `at`: one whose time + grace is before W is never due.
        may_be_due = f"$t + {g} >= {{ws_ms:Int64}}"
        if not ob.until:
            may_be_due += f" AND $t + {g} < {{at_ms:Int64}}"
        triggers = self.anchors(ob.triggers, ob.positive_results, ob.skip, side, may_be_due, tag)
        if ob.until:
            # The deadline of each trigger: trigger + grace, or the first `until` event
            # after it (ts > the trigger's) when that comes sooner. c.3 is the deadline.
            closers = self.times(ob.until, side)
            deadlined = f"{tag}_deadlined"
            self.outer[deadlined] = (
                f"arrayMap(c -> (c.1, c.2, arrayMin(arrayConcat([c.1 + {g}],"
                f" arrayFilter(x -> x > c.1, {closers})))), {triggers})"
            )
            triggers, deadline = deadlined, "c.3"
        else:
            deadline = f"c.1 + {g}"
        dues, misses = f"{tag}_dues", f"{tag}_misses"
        self.outer[dues] = f"arrayFilter(c -> {in_w.format(d=deadline)}, {triggers})"
        self.outer[due] = f"length({dues})"
        missed = (
            f"arrayFilter(c -> NOT arrayExists("
            f"x -> x >= c.1 - {lead} AND x <= {deadline}, {met_by}), {dues})"
        )
        # Misses are (time, event id), whatever the triggers carried.
        self.outer[misses] = f"arrayMap(c -> (c.1, c.2), {missed})" if ob.until else missed
        self.outer[unmet] = f"length({misses})"
        return due, unmet, misses

    def sql(self, source: CompiledSource) -> str:
        inner = ",\n        ".join(f"{expr} AS {alias}" for alias, expr in self.inner.items())
        return self.around(f"""
    SELECT
        session_id,
        max(in_scope) AS scoped,
        min(t) AS first_seen,
        max(t) AS last_seen,
        count() AS n_events,
        {inner}
    FROM (
      SELECT *, {self.sets.mask_sql()}
      FROM {source.events()}
    )
    GROUP BY session_id""")

    def around(self, per_session: str) -> str:
        """The query over `per_session`: one row per session with the inner aggregates."""
        outer = ",\n      ".join(f"{expr} AS {alias}" for alias, expr in self.outer.items())
        final = ",\n  ".join(f"{expr} AS {alias}" for alias, expr in self.final.items())
        return f"""
SELECT
  {final}
FROM (
  SELECT
      *,
      session_id != '' AS real,
      {outer or "1 AS _none"}
  FROM ({per_session}
  )
)"""


# Rows the checks ignore or keep with a caveat, counted by reason for the
# report's `data_quality` section: (per-session aggregate, total or None for sum).
# Role events are those whose name belongs to a role of the memory events (`_mr` != 0).
DATA_QUALITY: dict[str, tuple[str, str | None]] = {
    # The same event id written more than once (retries); counted once everywhere.
    # Counted among the events this query reads as roles (recall, observe, session end,
    # compaction: `_roles`), the ones whose duplicates could change a verdict; a second
    # per-session set of every event id would cost a hash set of the whole lookback.
    "duplicate_rows": ("length(_roles) - length(arrayDistinct(arrayMap(x -> x.3, _roles)))", None),
    # A latency that is not a finite, non-negative number: left out of latency checks.
    "latency_ignored": ("countIf(_mr != 0 AND latency_invalid)", None),
    # A payload that is not a JSON object: contract checks count it, others ignore it. Any
    # event, not only role events: a session start whose metadata cannot be read loses the
    # session id it carries (joelclaw), and that must not go uncounted.
    "payload_not_json_object": (
        # `payload_is_object` (checks.sources): JSONType(payload) = 'Object', or an exact
        # equivalent the preset computes more cheaply.
        "countIf(NOT payload_is_object)",
        None,
    ),
    # Names, session ids or payloads that are not valid UTF-8: kept byte for byte (a payload
    # with invalid bytes is also no JSON, so what it carries is lost).
    "invalid_utf8": (
        "countIf(NOT isValidUTF8(name) OR NOT isValidUTF8(session_id) OR NOT payload_is_utf8)",
        None,
    ),
    # Session ids over 1 KiB: kept (evidence shows them as they are).
    "session_id_over_1kib": ("toUInt64(length(session_id) > 1024)", None),
}


@dataclass(frozen=True)
class _Plan:
    """What to read back for each check from the final row."""

    coverage: dict[str, tuple[str, str, str, str | None]] = field(default_factory=dict)
    rates: dict[str, tuple[str, str, str, str, str]] = field(default_factory=dict)
    freshness: dict[str, tuple[str, str]] = field(default_factory=dict)
    triaged: dict[str, str] = field(default_factory=dict)  # coverage check id -> alias prefix


def carry_triage(
    b: SessionQueryBuilder, tag: str, unmets: Sequence[tuple[str, str | None]], dims: Sequence[str]
) -> None:
    """Carry a coverage check's triage out of the session query (`checks.triage` reads it).

    Its failing sessions (real, in the source's scope, an obligation unmet)
    counted, counted by each dimension of their first event, and the oldest 20
    with first and last seen, events, and per obligation (unmet, ended) flags.
    """
    for d in dims:
        # A session's dimensions are those of its first event.
        b.inner[f"sdim_{d}"] = f"argMin(dim_{d}, t)"
    failed = f"{tag}_failed"
    b.outer[failed] = f"real AND scoped AND ({' + '.join(u for u, _ in unmets)}) > 0"
    flags = ", ".join(
        f"{unmet}, toUInt8(ifNull({has_end}, 1))" if has_end else f"{unmet}, toUInt8(1)"
        for unmet, has_end in unmets
    )
    b.final[f"{tag}_items"] = f"countIf({failed})"
    b.final[f"{tag}_sessions"] = (
        f"groupArraySortedIf({EVIDENCE})"
        f"((first_seen, session_id, last_seen, n_events, [{flags}]), {failed})"
    )
    for d in dims:
        b.final[f"{tag}_by_{d}"] = f"sumMapIf(([sdim_{d}], [toUInt64(1)]), {failed})"


def session_checks(specs: Sequence[CheckSpec]) -> list[CheckSpec]:
    """The checks this module evaluates."""
    return [s for s in specs if isinstance(s.params, Coverage | OutcomeRate | Freshness)]


def build(
    specs: Sequence[CheckSpec], dims: Sequence[str] | None = None
) -> tuple[SessionQueryBuilder, _Plan]:
    """The session query for `specs` and where each check's numbers land in its row.

    With `dims` (the source's triage dimensions), every coverage check's
    triage breakdown is carried out of the same query (`carry_triage`).
    """
    b = SessionQueryBuilder()
    plan = _Plan()
    b.final["newest"] = "max(last_seen)"
    b.final["events"] = "sum(n_events)"
    for reason, (inner, final) in DATA_QUALITY.items():
        b.inner[f"dq_{reason}"] = inner
        b.final[f"dq_{reason}"] = final or f"sum(dq_{reason})"
    for i, spec in enumerate(specs):
        p = spec.params
        if isinstance(p, Coverage):
            dues, unmets, missed = [], [], []
            ended: list[tuple[str, str | None]] = []
            for j, ob in enumerate(p.obligations):
                due, unmet, misses = b.obligation(f"c{i}_{j}", ob)
                dues.append(due)
                unmets.append(unmet)
                missed.append(misses or "[]")
                has_end = b.first_of(ob.ends)[0] if ob.anchor is Anchor.END else None
                ended.append((unmet, has_end))
            if dims is not None:
                carry_triage(b, f"c{i}_tr", ended, dims)
                plan.triaged[spec.id] = f"c{i}_tr"
            scoped = "scoped"
            if p.session_filter:
                scoped = f"scoped_c{i}"
                b.inner[scoped] = f"max(scope_{spec.id})"
            judged = f"real AND {scoped}"
            if p.counted is Counted.EVENTS:
                # The trigger events: those due in W, those unmet, the oldest unmet.
                b.final[f"c{i}_sample"] = f"sumIf({' + '.join(dues)}, {judged})"
                b.final[f"c{i}_value"] = f"sumIf({' + '.join(unmets)}, {judged})"
                b.final[f"c{i}_evidence"] = (
                    f"groupArraySortedArray({EVIDENCE})"
                    f"(if({judged}, arrayConcat({', '.join(missed)}), []))"
                )
            else:
                failed = f"{judged} AND ({' + '.join(unmets)}) > 0"
                b.final[f"c{i}_sample"] = f"countIf({judged} AND ({' + '.join(dues)}) > 0)"
                b.final[f"c{i}_value"] = f"countIf({failed})"
                b.final[f"c{i}_evidence"] = (
                    f"groupArraySortedIf({EVIDENCE})((first_seen, session_id), {failed})"
                )
            seen = None
            if p.requires_seen:
                seen = f"c{i}_seen"
                b.final[seen] = f"sum({b.seen(p.requires_seen)})"
            plan.coverage[spec.id] = (f"c{i}_sample", f"c{i}_value", f"c{i}_evidence", seen)
        elif isinstance(p, OutcomeRate):
            _, unmet, misses = b.obligation(f"r{i}", p.loss)
            assert misses is not None
            b.final[f"r{i}_completed"] = f"sum({b.count_in_window(p.completed)})"
            b.final[f"r{i}_failed"] = f"sum({b.count_in_window(p.failed)})"
            b.final[f"r{i}_lost"] = f"sumIf({unmet}, real)"
            b.final[f"r{i}_lost_ids"] = f"groupArraySortedArray({EVIDENCE})(if(real, {misses}, []))"
            b.final[f"r{i}_failed_ids"] = (
                f"groupArraySortedArray({EVIDENCE})({b.oldest_in_window(p.failed)})"
            )
            plan.rates[spec.id] = tuple(  # type: ignore[assignment]
                f"r{i}_{part}" for part in ("completed", "failed", "lost", "lost_ids", "failed_ids")
            )
        elif isinstance(p, Freshness) and p.events:
            seen = b.seen(p.events)
            k = seen.removeprefix("seen_")
            b.final[f"f{i}_newest"] = f"maxIf(newest_{k}, {seen} > 0)"
            b.final[f"f{i}_count"] = f"sum({seen})"
            plan.freshness[spec.id] = (f"f{i}_newest", f"f{i}_count")
    b.params.update(b.sets.params())
    return b, plan


# Reads the per-session level from elsewhere (checks.state): the SQL and its parameters.
PerSession = Callable[[SessionQueryBuilder, Window], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class SessionFindings:
    results: dict[str, CheckResult]
    data_quality: dict[str, int]
    triage: dict[str, Triage] = field(default_factory=dict)  # breached coverage checks


def evaluate(
    store: Store,
    source: CompiledSource,
    window: Window,
    specs: Sequence[CheckSpec],
    *,
    dims: Sequence[str] | None = None,
    per_session: PerSession | None = None,
) -> SessionFindings:
    """Run the shared session query once and judge every coverage, rate and freshness check.

    With `dims`, the query reads the source with its dimensions and carries the
    triage breakdown of every breached coverage check.
    """
    b, plan = build(specs, dims)
    params = {**source.params, **window.params(), **b.params}
    read = source if dims is None else source.with_dims()
    sql = b.sql(read)
    if per_session is not None:  # the per-session level read from the session state
        state_read, extra = per_session(b, window)
        sql, params = b.around(state_read), {**params, **extra}
    row = store.aggregate(sql, params)
    quality = {reason: int(row[f"dq_{reason}"] or 0) for reason in DATA_QUALITY}
    results: dict[str, CheckResult] = {}
    for spec in specs:
        p = spec.params
        if isinstance(p, Coverage):
            results[spec.id] = _coverage(spec, p, row, plan.coverage[spec.id])
        elif isinstance(p, OutcomeRate):
            results[spec.id] = _rate(spec, p, row, plan.rates[spec.id])
        elif isinstance(p, Freshness):
            if p.events:
                newest_alias, count_alias = plan.freshness[spec.id]
                newest = row[newest_alias] if row[count_alias] else None
            else:
                newest = row["newest"] if row["events"] else None
            if newest is None:
                newest = _newest_ever(store, source, window, p)
            results[spec.id] = _freshness(spec, window, newest)
    triage = {
        spec.id: coverage_triage(spec, row, plan.triaged[spec.id], dims or ())
        for spec in specs
        if spec.id in plan.triaged and results[spec.id].status is Status.BREACHED
    }
    return SessionFindings(results, quality, triage)


def _coverage(
    spec: CheckSpec, p: Coverage, row: dict[str, Any], aliases: tuple[str, str, str, str | None]
) -> CheckResult:
    sample_alias, value_alias, evidence_alias, seen_alias = aliases
    sample, value = int(row[sample_alias]), int(row[value_alias])
    never_seen = seen_alias is not None and int(row[seen_alias]) == 0
    # Sessions by first_seen, or trigger events by ts: (time, id) either way, oldest first.
    ids = tuple(str(item_id) for _, item_id in row[evidence_alias])
    summary = f"{value} of {sample} {p.noun} {p.breach_phrase}"
    if never_seen:
        reason = (
            f"no {', '.join(p.requires_seen)} event within lookback: the source cannot be judged"
        )
    else:
        reason = f"no {p.noun[:-1]} had an obligation due in the window"
    return judge(
        spec,
        float(value),
        sample,
        summary,
        Evidence(sessions=ids) if p.counted is Counted.SESSIONS else Evidence(events=ids),
        no_data=sample == 0 or never_seen,
        no_data_summary=reason,
    )


def _rate(
    spec: CheckSpec, p: OutcomeRate, row: dict[str, Any], aliases: tuple[str, str, str, str, str]
) -> CheckResult:
    completed, failed, lost = (int(row[a]) for a in aliases[:3])
    denominator = completed + failed + lost
    value = (failed + lost) / denominator if denominator else None
    ids = sorted(list(row[aliases[3]]) + list(row[aliases[4]]))[:EVIDENCE]
    evidence = Evidence(
        completed=completed,
        failed=failed,
        lost=lost,
        events=tuple(event_id for _, event_id in ids),
    )
    summary = (
        f"{percent(value or 0)} of {denominator} {p.noun} failed or were lost"
        f" ({failed} failed, {lost} lost)"
    )
    return judge(
        spec,
        value,
        denominator,
        summary,
        evidence,
        no_data=denominator == 0,
        no_data_summary=f"no {p.noun} completed, failed or were due in the window",
    )


# 1900-01-01T00:00:00Z, the earliest time a DateTime64 holds: "the whole table" as a read
# range. (-2**62 overflowed the conversion to a DateTime64(9) source, otel_logs' Timestamp.)
EARLIEST_MS = -2_208_988_800_000


def _newest_ever(store: Store, source: CompiledSource, window: Window, p: Freshness) -> int | None:
    """The newest event before `at` in the whole table, when lookback holds none."""
    names = "" if not p.events else " AND name IN {fresh_names:Array(String)}"
    params = {
        **source.params,
        **window.params(),
        "lb_ms": EARLIEST_MS,
        "fresh_names": list(p.events),
    }
    row = store.aggregate(
        f"SELECT count() AS n, max(t) AS newest FROM {source.events()} WHERE 1{names}", params
    )
    return int(row["newest"]) if row.get("n") else None


def _freshness(spec: CheckSpec, window: Window, newest: int | None) -> CheckResult:
    if newest is None:
        return judge(
            spec,
            None,
            0,
            "no event at all before the evaluation time: silence is not health",
            Evidence(no_event=True),
        )
    age = (window.params()["at_ms"] - newest) / 1000
    summary = f"newest event {human_duration(age)} before the evaluation time"
    # The value comes from one event, the newest: a sample of one, whatever the duplicates.
    return judge(spec, age, 1, summary, Evidence(newest=from_ms(newest)))
