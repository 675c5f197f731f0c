"""Synthetic agent telemetry, generated inside ClickHouse with `INSERT ... SELECT`.

Event `e` (0 <= e < N) belongs to session `e // 100` and sits at slot
`e % 100` of it; every field is a hash of (seed, session, slot), so a table is
reproducible and generating 20M rows takes seconds, not minutes. A session lasts
100 steps of 20-80 s and lies wholly inside the lookback `[at - span, at)`. The
slots give a realistic name mix: about one event in five is a memory event of
docs/spec.md section 3 (recalls at start and mid-session, observes on compaction
and at the end, write-gate decisions, a deviation in one session of twenty); the
rest are tool calls, model requests, messages and sessionless gateway heartbeats.
Faults are injected in small, fixed proportions (cold starts, failed and lost
recalls and observes, slow recalls, missing injections, silent ends, contract
breaches, deviations citing missing ids) and 0.2% of the rows are written twice,
like retries from an agent's outbox.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from checks.source_ddl import create_table_sql
from watchdog.core.store import Store

EVENTS_PER_SESSION = 100
DUPLICATE_SHARE = 500  # one row in 500 is written twice
PRESETS = ("joelclaw", "otel_logs")
INSERT_SETTINGS = (
    " SETTINGS min_insert_block_size_rows = 2000000, min_insert_block_size_bytes = 0,"
    " max_insert_block_size = 2000000"
)
DEFAULT_AT = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
DEFAULT_SPAN = timedelta(hours=24)

# Non-memory events, weighted by repetition; the last one carries no session.
OTHER_NAMES = (
    ["tool.call"] * 4
    + ["tool.result"] * 4
    + ["llm.request", "llm.request", "llm.response", "llm.response"]
    + ["message.received", "message.sent", "file.read", "file.edit", "shell.exec"]
    + ["context.assembled", "session.handle.generated", "gateway.heartbeat"]
)
SESSIONLESS = "gateway.heartbeat"

# Event mixes: `today` (one event in five a memory event) and `memory` (recall on every turn:
# the slots 4-94 the plan does not name cycle through gate decision, recall started, its
# outcome, its injection and one other event: four in five). `lean` (joelclaw only): the memory
# mix with only what the checks read in its metadata (a cheap floor), and every kind breaching.
MIXES = ("today", "memory", "lean")
MIXES_OF = {"joelclaw": MIXES, "otel_logs": ("today", "memory")}
_MEMORY_TURN = """multiIf(
      j < 4 OR j > 94 OR j % 5 = 4, {other},
      j % 5 = 0, 'memory.gate.decision',
      j % 5 = 1, 'memory.recall.started',
      j % 5 = 2 AND fate >= 5, if(fate < 25, 'memory.recall.failed', 'memory.recall.completed'),
      j % 5 = 3 AND fate >= 25 AND rc > 0 AND NOT inject_missing, 'memory.recall.injected',
      {other})"""

WORDS = (
    "memory",
    "recall",
    "observe",
    "session",
    "agent",
    "deploy",
    "branch",
    "commit",
    "review",
    "test",
    "build",
    "cache",
    "config",
    "schema",
    "query",
    "index",
    "table",
    "migrate",
    "rollback",
    "release",
    "incident",
    "latency",
    "budget",
    "gateway",
    "worker",
    "queue",
    "retry",
    "backoff",
    "timeout",
    "token",
    "prompt",
    "context",
    "summary",
    "handoff",
    "customer",
    "invoice",
    "report",
    "dashboard",
    "metric",
    "alert",
    "pager",
    "runbook",
    "service",
    "cluster",
    "node",
    "shard",
    "replica",
    "partition",
    "merge",
    "compaction",
    "vector",
    "embedding",
    "search",
    "ranking",
    "feedback",
    "refactor",
    "lint",
    "format",
    "typing",
    "docs",
    "readme",
    "changelog",
)

TOOLS = ("bash", "read", "edit", "write", "grep", "glob", "web_fetch", "task")
PROJECTS = ("joelclaw", "pi-tools", "anamnese", "gateway", "infra", "docs", "site")
AGENTES = ("po", "dev", "qa", "arquiteto")
TIPOS = ("laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario")
VERDICTS = ["allow"] * 12 + ["hold"] * 3 + ["discard"] * 5


def _array(values: tuple[str, ...] | list[str]) -> str:
    """A ClickHouse array literal of fixed vocabulary (constants of this module, not data)."""
    for value in values:
        assert value.replace(".", "").replace("_", "").replace("-", "").isalnum(), value
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


# One row per event with its abstract fields; presets format them into columns.
# h(e), h(k), h(k, group) are independent 64-bit hashes: bits are sliced off
# them for each decision, so decisions within one row are independent.
PLAN = f"""
SELECT
  e, k, j, ts_ms, name, sid, id, he, fate, rc, lat, verdict, trig,
  agente, tipo, evidence, breach, q, cmd, tool, proj
FROM (
  SELECT
    number AS e,
    intDiv(e, {EVENTS_PER_SESSION}) AS k,
    e % {EVENTS_PER_SESSION} AS j,
    cityHash64({{seed:UInt64}}, k, 'session') AS hs,
    cityHash64({{seed:UInt64}}, k, intDiv(j, 10), 'group') AS hp,
    cityHash64({{seed:UInt64}}, e, 'event') AS he,
    20000 + hs % 60000 AS step_ms,
    {{at_ms:Int64}} - {{span_ms:Int64}}
      + toInt64(cityHash64({{seed:UInt64}}, k, 'start')
                % toUInt64({{span_ms:Int64}} - 99 * step_ms - 1000))
      + j * step_ms + toInt64(he % 997) AS ts_ms,
    hs % 200 = 0 AS cold,
    intDiv(hs, 256) % 10 = 0 AS silent,
    intDiv(hs, 65536) % 20 = 0 AS deviates,
    intDiv(hs, 16777216) % 10 < 6 AS compacts,
    intDiv(hs, 4294967296) % 200 = 0 AS no_end_observe,
    hp % 1000 AS fate,
    intDiv(hp, 1024) % 6 AS rc,
    intDiv(hp, 1048576) % 100 = 0 AS inject_missing,
    intDiv(hp, 1073741824) % 200 = 0 AS compaction_unobserved,
    if(intDiv(hp, 2147483648) % 100 < 3,
       3000 + intDiv(hp, 4294967296) % 6000,
       120 + intDiv(hp, 4294967296) % 1500) AS lat,
    multiIf(
      j = 0, 'session.started',
      j IN (1, 41) AND NOT (cold AND j = 1), 'memory.recall.started',
      j IN (2, 42) AND NOT (cold AND j = 2) AND fate >= 5,
        if(fate < 25, 'memory.recall.failed', 'memory.recall.completed'),
      j IN (3, 43) AND NOT (cold AND j = 3) AND fate >= 25 AND rc > 0 AND NOT inject_missing,
        'memory.recall.injected',
      j IN (25, 55, 85), 'memory.gate.decision',
      j = 60 AND compacts, 'compaction.before',
      j = 61 AND compacts AND NOT compaction_unobserved, 'memory.observe.requested',
      j = 62 AND compacts AND NOT compaction_unobserved AND fate >= 10,
        if(fate < 30, 'observe.store.failed', 'observe.store.completed'),
      j = 70 AND deviates, 'anamnese.agent_deviation',
      j = 97 AND NOT silent, 'session.ended',
      j = 98 AND NOT no_end_observe, 'memory.observe.requested',
      j = 99 AND NOT no_end_observe AND fate >= 10,
        if(fate < 30, 'observe.store.failed', 'observe.store.completed'),
      __OTHER__
    ) AS name,
    lower(concat(hex(cityHash64({{seed:UInt64}}, k, 'sid')),
                 hex(cityHash64({{seed:UInt64}}, k, 'sid2')))) AS sid,
    concat('evt_', lower(concat(hex(cityHash64({{seed:UInt64}}, e, 'id')),
                                hex(cityHash64({{seed:UInt64}}, e, 'id2'))))) AS id,
    {_array(VERDICTS)}[1 + intDiv(he, 7) % {len(VERDICTS)}] AS verdict,
    multiIf(j < 90, 'compaction', he % 2 = 0, 'session_shutdown', 'shutdown') AS trig,
    {_array(AGENTES)}[1 + intDiv(he, 11) % {len(AGENTES)}] AS agente,
    intDiv(he, 13) % 100 AS breach,
    if(breach BETWEEN 5 AND 9, 'desvio',
       {_array(TIPOS)}[1 + intDiv(he, 17) % {len(TIPOS)}]) AS tipo,
    -- Evidence cites the session's previous events; breaches 10-14 cite an id that never existed.
    arrayMap(x -> concat('evt_', lower(concat(hex(cityHash64({{seed:UInt64}}, e - x, 'id')),
                                              hex(cityHash64({{seed:UInt64}}, e - x, 'id2'))))),
             range(1, 2 + intDiv(he, 19) % 3)) AS cited,
    if(breach BETWEEN 10 AND 14, arrayPushBack(cited, concat('evt_missing_', toString(e))), cited)
      AS evidence,
    {_array(WORDS)} AS words,
    arrayStringConcat(arrayMap(x -> words[1 + cityHash64(he, x) % {len(WORDS)}],
                               range(6 + intDiv(he, 23) % 18)), ' ') AS q,
    arrayStringConcat(arrayMap(x -> words[1 + cityHash64(he, x, 'c') % {len(WORDS)}],
                               range(4 + intDiv(he, 29) % 24)), ' ') AS cmd,
    {_array(TOOLS)}[1 + intDiv(he, 31) % {len(TOOLS)}] AS tool,
    {_array(PROJECTS)}[1 + k % {len(PROJECTS)}] AS proj
  FROM numbers({{rows:UInt64}})
)
"""

_OTHER = f"{_array(OTHER_NAMES)}[1 + he % {len(OTHER_NAMES)}]"


# The lean mix breaches every kind window data can: fates drawn from 250 (the outcome rates and
# circuit breaker), 8% slow recalls (p95), 3 discards in 4 (the share); freshness alone stays ok
# (tests/test_bench_generator.py holds it).
_LEAN_FAULTS = (
    ("hp % 1000 AS fate", "hp % 250 AS fate"),
    ("intDiv(hp, 2147483648) % 100 < 3", "intDiv(hp, 2147483648) % 100 < 8"),
    (_array(VERDICTS), _array(["allow"] * 3 + ["hold"] * 2 + ["discard"] * 15)),
)


def plan_sql(mix: str) -> str:
    """The plan of `mix`: the name of an event no fixed slot names, and the lean mix's faults."""
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r} (accepted: {', '.join(MIXES)})")
    other = _OTHER if mix == "today" else _MEMORY_TURN.format(other=_OTHER)
    plan = PLAN.replace("__OTHER__", other)
    if mix == "lean":
        for was, lean in _LEAN_FAULTS:
            plan = plan.replace(was, lean)
    return plan


# The joelclaw metadata_json of each kind of event, as real emitters write it.
_JOELCLAW_METADATA = f"""
concat('{{',
  multiIf(name = '{SESSIONLESS}', '',
          startsWith(name, 'observe.store.'), concat('"sessionId":"', sid, '",'),
          concat('"session_id":"', sid, '",')),
  multiIf(
    name = 'memory.recall.started',
      concat('"query":"', q, '","limit":10,"project":"', proj, '"'),
    name = 'memory.recall.completed',
      concat('"query":"', q, '","latency_ms":', toString(lat), ',"result_count":', toString(rc),
             ',"injected_count":', toString(rc), ',"project":"', proj, '"'),
    name = 'memory.recall.failed',
      concat('"query":"', q, '","latency_ms":', toString(lat), ',"error":"timeout"'),
    name = 'memory.recall.injected',
      concat('"result_count":', toString(rc), ',"tokens":', toString(200 + he % 3000)),
    name = 'memory.observe.requested',
      concat('"trigger":"', trig, '","messages":', toString(10 + he % 200)),
    startsWith(name, 'observe.store.'),
      concat('"trigger":"', trig, '","allow":', toString(he % 7), ',"hold":', toString(he % 3),
             ',"discard":', toString(he % 4), ',"latency_ms":', toString(400 + he % 4000)),
    name = 'memory.gate.decision',
      concat('"verdict":"', verdict, '","score":', toString((he % 1000) / 1000),
             ',"reason":"', substring(q, 1, 40), '"'),
    name = 'anamnese.agent_deviation',
      concat('"agente":"', agente, '","tipo":"', tipo, '","evidenceEventIds":',
             toJSONString(evidence), if(breach < 5, concat(',"texto":"', substring(q, 1, 30), '"'), '')),
    name IN ('session.started', 'session.ended'),
      concat('"model":"claude-sonnet","cwd":"/home/agent/', proj, '"'),
    name = '{SESSIONLESS}',
      concat('"uptime_s":', toString(he % 86400), ',"connections":', toString(he % 50)),
    concat('"tool":"', tool, '","command":"', cmd, '","exit_code":', toString(intDiv(he, 37) % 20 = 0),
           ',"cwd":"/home/agent/', proj, '"')),
  '}}')"""

# The lean mix's metadata: the session id and what the checks read, nothing else.
_JOELCLAW_LEAN_METADATA = f"""
concat('{{',
  multiIf(name = '{SESSIONLESS}', '',
          startsWith(name, 'observe.store.'), concat('"sessionId":"', sid, '",'),
          concat('"session_id":"', sid, '",')),
  multiIf(
    name = 'memory.recall.completed',
      concat('"latency_ms":', toString(lat), ',"result_count":', toString(rc)),
    name = 'memory.recall.failed', concat('"latency_ms":', toString(lat)),
    name = 'memory.recall.injected', concat('"result_count":', toString(rc)),
    name = 'memory.observe.requested', concat('"trigger":"', trig, '"'),
    startsWith(name, 'observe.store.'),
      concat('"trigger":"', trig, '","latency_ms":', toString(400 + he % 4000)),
    name = 'memory.gate.decision', concat('"verdict":"', verdict, '"'),
    name = 'anamnese.agent_deviation',
      concat('"agente":"', agente, '","tipo":"', tipo, '","evidenceEventIds":',
             toJSONString(evidence)),
    '"v":1'),
  '}}')"""

_JOELCLAW_INSERT = f"""
INSERT INTO __TABLE__
  (id, timestamp, sessionId, systemId, level, source, component, action, success,
   duration_ms, error, metadata_json, metadata_keys, search_text, received_at)
SELECT
  id,
  fromUnixTimestamp64Milli(ts_ms, 'UTC') AS timestamp,
  multiIf(name = '{SESSIONLESS}', 'gateway', startsWith(name, 'observe.store.'), NULL,
          'interactive') AS sessionId,
  'panda' AS systemId,
  if(endsWith(name, '.failed'), 'error', 'info') AS level,
  multiIf(name = '{SESSIONLESS}', 'gateway', startsWith(name, 'observe.store.'), 'worker',
          'interactive') AS source,
  multiIf(startsWith(name, 'memory.recall.'), 'memory-enforcer',
          startsWith(name, 'observe.') OR startsWith(name, 'memory.observe.'), 'observe',
          startsWith(name, 'memory.gate.'), 'write-gate', startsWith(name, 'anamnese.'), 'anamnese',
          startsWith(name, 'tool.') OR name = 'shell.exec' OR startsWith(name, 'file.'), 'pi-tools',
          'agent') AS component,
  name AS action,
  toUInt8(NOT endsWith(name, '.failed')) AS success,
  if(startsWith(name, 'tool.') OR name = 'shell.exec', toUInt32(5 + he % 5000), NULL) AS duration_ms,
  multiIf(name = 'observe.store.failed', 'store failed', name = 'memory.recall.failed',
          'operation_failed', '') AS error,
  {_JOELCLAW_METADATA} AS metadata_json,
  JSONExtractKeys(metadata_json) AS metadata_keys,
  concat(name, ' ', if(startsWith(name, 'memory.recall.'), q, cmd)) AS search_text,
  fromUnixTimestamp64Milli(ts_ms + 150, 'UTC') AS received_at
FROM (__PLAN__)
"""

_OTEL_INSERT = f"""
INSERT INTO __TABLE__
  (Timestamp, TraceId, SpanId, TraceFlags, SeverityText, SeverityNumber, ServiceName, Body,
   ResourceSchemaUrl, ResourceAttributes, ScopeSchemaUrl, ScopeName, ScopeVersion,
   ScopeAttributes, LogAttributes, EventName)
SELECT
  fromUnixTimestamp64Nano(toInt64(ts_ms) * 1000000 + toInt64(he % 1000000), 'UTC') AS Timestamp,
  lower(concat(hex(cityHash64({{seed:UInt64}}, k, 'trace')), hex(cityHash64(k, j)))) AS TraceId,
  lower(hex(he)) AS SpanId,
  1 AS TraceFlags,
  if(endsWith(name, '.failed'), 'ERROR', 'INFO') AS SeverityText,
  if(endsWith(name, '.failed'), 17, 9) AS SeverityNumber,
  multiIf(name = '{SESSIONLESS}', 'gateway', startsWith(name, 'observe.store.'), 'memory-worker',
          'pi-agent') AS ServiceName,
  concat(name, ': ', substring(if(startsWith(name, 'memory.recall.'), q, cmd), 1, 48)) AS Body,
  'https://opentelemetry.io/schemas/1.26.0' AS ResourceSchemaUrl,
  map('service.name', ServiceName, 'service.version', '2.3.1',
      'host.name', concat('agent-host-', toString(k % 16)),
      'telemetry.sdk.language', 'nodejs', 'telemetry.sdk.name', 'opentelemetry',
      'process.pid', toString(1000 + k % 30000)) AS ResourceAttributes,
  '' AS ScopeSchemaUrl,
  'pi-tools' AS ScopeName,
  '1.0.0' AS ScopeVersion,
  map() AS ScopeAttributes,
  -- Gateway heartbeats carry no event.id: their event id is the preset's hash of the row.
  mapFilter((key, value) -> value != '', map(
    'session.id', if(name = '{SESSIONLESS}', '', sid),
    'event.id', if(name = '{SESSIONLESS}', '', id),
    'query', if(startsWith(name, 'memory.recall.') AND name != 'memory.recall.injected', q, ''),
    'latency_ms', multiIf(name IN ('memory.recall.completed', 'memory.recall.failed'), toString(lat),
                          startsWith(name, 'observe.store.'), toString(400 + he % 4000), ''),
    'result_count', if(name IN ('memory.recall.completed', 'memory.recall.injected'), toString(rc), ''),
    'trigger', if(name = 'memory.observe.requested' OR startsWith(name, 'observe.store.'), trig, ''),
    'verdict', if(name = 'memory.gate.decision', verdict, ''),
    'agente', if(name = 'anamnese.agent_deviation', agente, ''),
    'tipo', if(name = 'anamnese.agent_deviation', tipo, ''),
    'evidenceEventIds', if(name = 'anamnese.agent_deviation', toJSONString(evidence), ''),
    'texto', if(name = 'anamnese.agent_deviation' AND breach < 5, substring(q, 1, 30), ''),
    'tool.name', if(startsWith(name, 'tool.'), tool, ''),
    'tool.command', if(startsWith(name, 'tool.') OR name = 'shell.exec', cmd, ''),
    'code.filepath', if(startsWith(name, 'file.'), concat('/home/agent/', proj, '/src/', tool, '.ts'), ''),
    'gen_ai.request.model', if(startsWith(name, 'llm.'), 'claude-sonnet', ''),
    'gen_ai.usage.output_tokens', if(name = 'llm.response', toString(he % 4000), '')
  )) AS LogAttributes,
  name AS EventName
FROM (__PLAN__)
"""

_INSERTS = {
    # Sorted as the table is: the SELECT sorts on both cores, the insert finds it sorted.
    "joelclaw": _JOELCLAW_INSERT + "ORDER BY id",
    "otel_logs": _OTEL_INSERT + "ORDER BY toStartOfFiveMinutes(Timestamp), ServiceName, Timestamp",
}
_JOELCLAW_COLUMNS = (
    "id, timestamp, sessionId, systemId, level, source, component, action, success,"
    " duration_ms, error, metadata_json, metadata_keys, search_text"
)
# Rows written twice: the same event again, as a second part (joelclaw: a later received_at).
_DUPLICATES = {
    "joelclaw": f"""
INSERT INTO __TABLE__ ({_JOELCLAW_COLUMNS}, received_at)
SELECT {_JOELCLAW_COLUMNS}, received_at + toIntervalSecond(30)
FROM __TABLE__
WHERE id IN (SELECT id FROM __TABLE__ ORDER BY cityHash64(id, {{seed:UInt64}}) LIMIT {{dups:UInt64}})
""",
    "otel_logs": """
INSERT INTO __TABLE__
SELECT * FROM __TABLE__
WHERE LogAttributes['event.id'] IN (
  SELECT LogAttributes['event.id'] FROM __TABLE__ WHERE LogAttributes['event.id'] != ''
  ORDER BY cityHash64(LogAttributes['event.id'], {seed:UInt64}) LIMIT {dups:UInt64})
""",
}


@dataclass(frozen=True)
class Generated:
    """A generated table: where it is and what went into it."""

    preset: str
    table: str
    events: int
    duplicates: int
    at: datetime
    span: timedelta
    seconds: float


def table_name(
    preset: str, events: int, seed: int, database: str = "bench", mix: str = "today"
) -> str:
    """The conventional name of a generated table, e.g. `bench.joelclaw_1000000_s0`
    (`bench.joelclaw_memory_1000000_s0` in the memory mix)."""
    infix = "" if mix == "today" else f"_{mix}"
    return f"{database}.{preset}{infix}_{events}_s{seed}"


def generation_params(
    rows: int, *, seed: int = 0, at: datetime = DEFAULT_AT, span: timedelta = DEFAULT_SPAN
) -> dict[str, Any]:
    """The bound parameters of the generating query."""
    return {
        "rows": rows,
        "seed": seed,
        "at_ms": int(at.timestamp() * 1000),
        "span_ms": int(span.total_seconds() * 1000),
    }


def generate(
    store: Store,
    preset: str,
    table: str,
    events: int,
    *,
    seed: int = 0,
    at: datetime = DEFAULT_AT,
    span: timedelta = DEFAULT_SPAN,
    mix: str = "today",
) -> Generated:
    """(Re)create `table` with exactly `events` rows of synthetic telemetry for `preset`.

    The distinct events are written first, in parts of 2M rows that are
    never merged; then 0.2% of them are written again as a part of their
    own, which the checks must count once.
    """

    if preset not in _INSERTS:
        raise ValueError(f"unknown preset {preset!r} (accepted: {', '.join(PRESETS)})")
    if span.total_seconds() * 1000 <= 99 * 80000 + 1000:
        raise ValueError("span must exceed the longest session (about 2.2h)")
    started = time.monotonic()
    database = table.split(".")[0]
    store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    store.command(f"DROP TABLE IF EXISTS {table}")
    store.command(create_table_sql(preset, table, ttl=False))  # fixed dates must not expire
    # No background merges: they would run during (and skew) the measurements, in
    # whichever process holds the store; parts of 2M rows are what a busy table has.
    store.command(f"ALTER TABLE {table} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1")
    duplicates = events // DUPLICATE_SHARE
    distinct = events - duplicates
    params = generation_params(distinct, seed=seed, at=at, span=span)
    if mix not in MIXES_OF.get(preset, ()):
        raise ValueError(f"no {mix} mix for {preset} (accepted: {', '.join(MIXES_OF[preset])})")
    insert = _INSERTS[preset].replace("__TABLE__", table).replace("__PLAN__", plan_sql(mix))
    if mix == "lean":
        insert = insert.replace(_JOELCLAW_METADATA, _JOELCLAW_LEAN_METADATA)
    store.command(insert + INSERT_SETTINGS, params)
    if duplicates:
        store.command(
            _DUPLICATES[preset].replace("__TABLE__", table), {"seed": seed, "dups": duplicates}
        )
    return Generated(
        preset=preset,
        table=table,
        events=events,
        duplicates=duplicates,
        at=at,
        span=span,
        seconds=time.monotonic() - started,
    )


def row_count(store: Store, table: str) -> int:
    """Rows in `table` (duplicates included), or -1 when it does not exist."""
    database, name = table.split(".")
    row = store.query(
        "SELECT sum(total_rows) AS n, count() AS t FROM system.tables"
        " WHERE database = {db:String} AND name = {name:String}",
        {"db": database, "name": name},
    ).first()
    return int(row["n"] or 0) if row.get("t") else -1
