"""DDL of the source tables the presets read, as their writers create them.

Used to build the demo store, test scenarios and benchmark data; the watchdog
itself never creates or alters a source table.
"""

from __future__ import annotations

JOELCLAW_OTEL_EVENTS = """
CREATE TABLE IF NOT EXISTS {table}
(
    id String,
    timestamp DateTime64(3, 'UTC'),
    date Date DEFAULT toDate(timestamp),
    sessionId Nullable(String),
    systemId Nullable(String),
    level LowCardinality(String),
    source LowCardinality(String),
    component LowCardinality(String),
    action String,
    success UInt8,
    duration_ms Nullable(UInt32),
    error String,
    metadata_json String,
    metadata_keys Array(String),
    search_text String,
    received_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toYYYYMM(timestamp)
ORDER BY (id, timestamp, source, component, action)
TTL toDateTime(timestamp) + INTERVAL 180 DAY
"""

# The OpenTelemetry Collector ClickHouse exporter's logs table, current schema.
OTEL_LOGS = """
CREATE TABLE IF NOT EXISTS {table}
(
    Timestamp DateTime64(9),
    TraceId String,
    SpanId String,
    TraceFlags UInt8,
    SeverityText LowCardinality(String),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String),
    Body String,
    ResourceSchemaUrl LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String),
    ScopeSchemaUrl LowCardinality(String),
    ScopeName String,
    ScopeVersion LowCardinality(String),
    ScopeAttributes Map(LowCardinality(String), String),
    LogAttributes Map(LowCardinality(String), String),
    EventName String
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (toStartOfFiveMinutes(Timestamp), ServiceName, Timestamp)
"""

# The older generation: TimestampTime next to Timestamp, no EventName column.
OTEL_LOGS_LEGACY = """
CREATE TABLE IF NOT EXISTS {table}
(
    Timestamp DateTime64(9),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),
    TraceId String,
    SpanId String,
    TraceFlags UInt8,
    SeverityText LowCardinality(String),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String),
    Body String,
    ResourceSchemaUrl LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String),
    ScopeSchemaUrl LowCardinality(String),
    ScopeName String,
    ScopeVersion LowCardinality(String),
    ScopeAttributes Map(LowCardinality(String), String),
    LogAttributes Map(LowCardinality(String), String)
)
ENGINE = MergeTree
PARTITION BY toDate(TimestampTime)
ORDER BY (ServiceName, TimestampTime, Timestamp)
"""

OTEL_TRACES = """
CREATE TABLE IF NOT EXISTS {table}
(
    Timestamp DateTime64(9),
    TraceId String,
    SpanId String,
    ParentSpanId String,
    TraceState String,
    SpanName LowCardinality(String),
    SpanKind LowCardinality(String),
    ServiceName LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String),
    ScopeName String,
    ScopeVersion String,
    SpanAttributes Map(LowCardinality(String), String),
    Duration UInt64,
    StatusCode LowCardinality(String),
    StatusMessage String,
    Events Nested(Timestamp DateTime64(9), Name LowCardinality(String), Attributes Map(LowCardinality(String), String)),
    Links Nested(TraceId String, SpanId String, TraceState String, Attributes Map(LowCardinality(String), String))
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
"""

DDL = {
    "joelclaw": JOELCLAW_OTEL_EVENTS,
    "otel_logs": OTEL_LOGS,
    "otel_logs_legacy": OTEL_LOGS_LEGACY,
    "otel_traces": OTEL_TRACES,
}


def create_table_sql(kind: str, table: str, *, ttl: bool = True) -> str:
    """The CREATE TABLE statement of a source table of `kind` named `table`.

    `ttl=False` leaves out the retention TTL: fixed-date scenarios (tests,
    rule files) would otherwise be deleted on insert once they age past it.
    """
    sql = DDL[kind].format(table=table)
    if not ttl:
        sql = "\n".join(line for line in sql.splitlines() if not line.startswith("TTL "))
    return sql
