"""DDL of the source tables the presets read, as their writers create them.

Used to build the demo store, test scenarios and benchmark data
(docs/development.md#adding-a-telemetry-layout-a-preset). The watchdog creates a source table
only as the OTLP receiver (watchdog.daemon.ingest): `otel_logs` and `otel_traces` in the
exporter's own form (`EXPORTER_DDL`), codecs and skip indexes included, so that a Collector
pointed at the same tables later finds them as it would have made them
(docs/sources.md#the-exporters-layouts).
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

# The OpenTelemetry Collector ClickHouse exporter's tables, in each layout and version it
# has created (its sqltemplates/*_table.sql, placeholders filled: engine MergeTree, no
# cluster, no TTL). Columns, types, engine, keys and skip indexes are the exporter's;
# column codecs are left out (they change nothing the watchdog reads).

_OTEL_LOG_COLUMNS = """
    TraceId String,
    SpanId String,
    TraceFlags UInt8,
    SeverityText LowCardinality(String),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String),
    Body String,
    ResourceSchemaUrl LowCardinality(String),"""

_MAP = "Map(LowCardinality(String), String)"

_MAP_LOG_INDEXES = """
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_key mapKeys(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_value mapValues(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8"""

# Logs, Map layout, current (v0.162 on): EventName, no TimestampTime, a five-minute
# bucket leading the sort key, hot resource keys materialized.
OTEL_LOGS = f"""
CREATE TABLE IF NOT EXISTS {{table}}
(
    Timestamp DateTime64(9),{_OTEL_LOG_COLUMNS}
    ResourceAttributes {_MAP},
    ScopeSchemaUrl LowCardinality(String),
    ScopeName String,
    ScopeVersion LowCardinality(String),
    ScopeAttributes {_MAP},
    LogAttributes {_MAP},
    EventName String,
    `__otel_materialized_k8s.cluster.name` LowCardinality(String)
        MATERIALIZED ResourceAttributes['k8s.cluster.name'],
    `__otel_materialized_k8s.namespace.name` LowCardinality(String)
        MATERIALIZED ResourceAttributes['k8s.namespace.name'],
    `__otel_materialized_deployment.environment.name` LowCardinality(String)
        MATERIALIZED ResourceAttributes['deployment.environment.name'],
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_lower_body lower(Body) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (toStartOfFiveMinutes(Timestamp), ServiceName, Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""

# Logs, Map layout, the versions before: TimestampTime leads the sort key, and EventName
# came late (`otel_logs_legacy` is the one without it).
_OTEL_LOGS_TIMESTAMP_TIME = f"""
CREATE TABLE IF NOT EXISTS {{table}}
(
    Timestamp DateTime64(9),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),{_OTEL_LOG_COLUMNS}
    ResourceAttributes {_MAP},
    ScopeSchemaUrl LowCardinality(String),
    ScopeName String,
    ScopeVersion LowCardinality(String),
    ScopeAttributes {_MAP},
    LogAttributes {_MAP},{{event_name}}{_MAP_LOG_INDEXES}
)
ENGINE = MergeTree
PARTITION BY toDate(TimestampTime)
PRIMARY KEY (ServiceName, TimestampTime)
ORDER BY (ServiceName, TimestampTime, Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""
OTEL_LOGS_V140 = _OTEL_LOGS_TIMESTAMP_TIME.replace("{event_name}", "\n    EventName String,")
OTEL_LOGS_LEGACY = _OTEL_LOGS_TIMESTAMP_TIME.replace("{event_name}", "")

# Logs, JSON layout: attributes of type JSON; newer versions list each column's
# flattened keys beside it (and the newest adds EventName).
_OTEL_LOGS_JSON = f"""
CREATE TABLE IF NOT EXISTS {{table}}
(
    Timestamp DateTime64(9),{_OTEL_LOG_COLUMNS}
    ResourceAttributes JSON,{{resource_keys}}
    ScopeSchemaUrl LowCardinality(String),
    ScopeName String,
    ScopeVersion LowCardinality(String),
    ScopeAttributes JSON,{{scope_keys}}
    LogAttributes JSON,{{log_keys}}{{event_name}}{{key_indexes}}
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, toDateTime(Timestamp))
ORDER BY (ServiceName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""
_KEYS = "Array(LowCardinality(String))"
_JSON_KEY_INDEXES = """
    INDEX idx_res_attr_keys ResourceAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_keys ScopeAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_keys LogAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,"""


def _json_logs(*, keys: bool, event_name: bool) -> str:
    parts = {
        "{resource_keys}": f"\n    ResourceAttributesKeys {_KEYS}," if keys else "",
        "{scope_keys}": f"\n    ScopeAttributesKeys {_KEYS}," if keys else "",
        "{log_keys}": f"\n    LogAttributesKeys {_KEYS}," if keys else "",
        "{event_name}": "\n    EventName String," if event_name else "",
        "{key_indexes}": _JSON_KEY_INDEXES if keys else "",
    }
    sql = _OTEL_LOGS_JSON
    for marker, text in parts.items():
        sql = sql.replace(marker, text)
    return sql


OTEL_LOGS_JSON_V1 = _json_logs(keys=False, event_name=False)
OTEL_LOGS_JSON = _json_logs(keys=True, event_name=False)
OTEL_LOGS_JSON_EVENT_NAME = _json_logs(keys=True, event_name=True)

_SPAN_COLUMNS = """
    Timestamp DateTime64(9),
    TraceId String,
    SpanId String,
    ParentSpanId String,
    TraceState String,
    SpanName LowCardinality(String),
    SpanKind LowCardinality(String),
    ServiceName LowCardinality(String),"""

_MAP_SPAN_INDEXES = """
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1"""


def _spans(attributes: str, nested: str, extra: str, indexes: str, keys: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {{table}}
(
    {_SPAN_COLUMNS.strip()}
    ResourceAttributes {attributes},{keys.replace("NAME", "ResourceAttributesKeys")}
    ScopeName String,
    ScopeVersion String,
    SpanAttributes {attributes},{keys.replace("NAME", "SpanAttributesKeys")}
    Duration UInt64,
    StatusCode LowCardinality(String),
    StatusMessage String,
    Events Nested(Timestamp DateTime64(9), Name LowCardinality(String), Attributes {nested}),
    Links Nested(TraceId String, SpanId String, TraceState String, Attributes {nested}),{extra}
    {indexes.strip()}
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
"""


# Traces, Map layout, current: attribute items for text search, a primary key prefix.
OTEL_TRACES = (
    _spans(
        _MAP,
        _MAP,
        "\n    ResourceAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2),"
        " CAST(ResourceAttributes, 'Array(Tuple(String, String))')),"
        "\n    SpanAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2),"
        " CAST(SpanAttributes, 'Array(Tuple(String, String))')),",
        _MAP_SPAN_INDEXES
        + ",\n    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8",
        "",
    )
    + "PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))\n"
    "ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)\n"
    "SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1\n"
)
# Traces, Map layout, before: sorted by the second, no primary key of its own.
OTEL_TRACES_LEGACY = (
    _spans(_MAP, _MAP, "", _MAP_SPAN_INDEXES, "")
    + "ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))\n"
    "SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1\n"
)
_JSON_SPAN_ORDER = (
    "ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)\n"
    "SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1\n"
)
# Traces, JSON layout, first without, then with the keys columns.
OTEL_TRACES_JSON_V1 = (
    _spans("JSON", "JSON", "", "INDEX idx_duration Duration TYPE minmax GRANULARITY 1", "")
    + _JSON_SPAN_ORDER
)
OTEL_TRACES_JSON = (
    _spans(
        "JSON",
        "JSON",
        "",
        "INDEX idx_res_attr_keys ResourceAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,"
        "\n    INDEX idx_span_attr_keys SpanAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,"
        "\n    INDEX idx_duration Duration TYPE minmax GRANULARITY 1",
        f"\n    NAME {_KEYS},",
    )
    + _JSON_SPAN_ORDER
)


def _exporter(ddl: str) -> str:
    """`ddl` as the receiver issues it: `{settings}` adds table settings after the exporter's own."""
    assert ddl.count("ttl_only_drop_parts = 1\n") == 1
    return ddl.replace("ttl_only_drop_parts = 1\n", "ttl_only_drop_parts = 1{settings}\n")


# The tables the OTLP receiver creates: the exporter's current Map layout (", name = value"
# in `{settings}` adds table settings).
EXPORTER_OTEL_LOGS = _exporter(OTEL_LOGS)
EXPORTER_OTEL_TRACES = _exporter(OTEL_TRACES)
# By OTLP signal: the table the receiver writes of each.
EXPORTER_DDL = {"logs": EXPORTER_OTEL_LOGS, "traces": EXPORTER_OTEL_TRACES}

DDL = {
    "joelclaw": JOELCLAW_OTEL_EVENTS,
    "otel_logs": OTEL_LOGS,
    "otel_logs_v140": OTEL_LOGS_V140,
    "otel_logs_legacy": OTEL_LOGS_LEGACY,
    "otel_logs_json_v1": OTEL_LOGS_JSON_V1,
    "otel_logs_json": OTEL_LOGS_JSON,
    "otel_logs_json_event_name": OTEL_LOGS_JSON_EVENT_NAME,
    "otel_traces": OTEL_TRACES,
    "otel_traces_legacy": OTEL_TRACES_LEGACY,
    "otel_traces_json_v1": OTEL_TRACES_JSON_V1,
    "otel_traces_json": OTEL_TRACES_JSON,
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
