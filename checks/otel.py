"""The OpenTelemetry Collector ClickHouse exporter's tables, logs and spans, in each layout it
creates (attributes as a Map or as the JSON type, told apart by their column types), read to
the same normalized event and so the same verdicts (docs/sources.md#the-exporters-layouts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from checks.presets import (
    AT,
    INTEGER,
    LB,
    STRING,
    TIME,
    Attribute,
    ColumnType,
    Expr,
    Preset,
    first_non_empty,
)
from watchdog.core.sql import quoted

ATTRIBUTES = ColumnType(
    r"Map\((LowCardinality\(String\)|String), ?String\)|JSON(\(.*\))?",
    "Map(LowCardinality(String), String) or JSON",
)


# The raw columns the logs preset hashes into an event id when the event carries none.
ROW_COLUMNS = ("Timestamp", "ServiceName", "Body", "TraceId", "SpanId")


class Layout(StrEnum):
    """How an attribute column is stored: a Map, or the JSON type."""

    MAP = "map"
    JSON = "json"


@dataclass(frozen=True)
class Attributes:
    """One attribute column of the exporter's table, and how its values are read."""

    column: str
    layout: Layout

    def value(self, key: str) -> str:
        """SQL: the attribute `key` as the Map layout's text; '' when absent."""
        if self.layout is Layout.JSON:
            # A dotted key is a nested path in the JSON type: getSubcolumn follows it.
            return f"toString(getSubcolumn({self.column}, {quoted(key)}))"
        return f"{self.column}[{quoted(key)}]"

    def payload(self) -> str:
        """SQL: the attributes as a JSON object of flat keys and text values."""
        if self.layout is Layout.MAP:
            return f"toJSONString({self.column})"
        # JSONAllValues gives each path's value as ClickHouse text, in path order; an
        # array's text becomes JSON again (an array of objects: its objects' JSON).
        text = (
            "arrayMap((v, t) -> multiIf("
            "startsWith(t, 'Array(JSON'),"
            " concat('[', arrayStringConcat(CAST(if(startsWith(t, 'Array(JSON'), v, '[]'),"
            " 'Array(String)'), ','), ']'),"
            " startsWith(t, 'Array('),"
            " toJSONString(CAST(if(startsWith(t, 'Array('), v, '[]'), 'Array(Dynamic)')),"
            f" v), JSONAllValues({self.column}), mapValues(JSONAllPathsWithTypes({self.column})))"
        )
        return f"toJSONString(mapFromArrays(JSONAllPaths({self.column}), {text}))"

    def utf8(self) -> str:
        """SQL: whether every key and value is valid UTF-8.

        A Map payload serialises to a JSON object unless one of them is not
        (toJSONString passes the bytes through, and the text then does not
        parse): for the Map layout, both payload checks are this one test,
        without serialising the map.
        """
        if self.layout is Layout.JSON:
            keys, values = f"JSONAllPaths({self.column})", f"JSONAllValues({self.column})"
        else:
            keys, values = f"mapKeys({self.column})", f"mapValues({self.column})"
        return (
            f"(arrayAll(x -> isValidUTF8(x), {keys}) AND arrayAll(x -> isValidUTF8(x), {values}))"
        )

    def text(self) -> str:
        """SQL: the whole column as text (for a row hash)."""
        return (
            f"toJSONString({self.column})"
            if self.layout is Layout.JSON
            else f"toString({self.column})"
        )


def _unparsable(text: str) -> str:
    """SQL: 1 when an attribute holds a latency (not '' nor 'null') that is no number."""
    return (
        f"(({text}) NOT IN ('', 'null') AND toFloat64OrNull(replaceAll({text}, '\"', '')) IS NULL)"
    )


def attributes(column: str, types: Mapping[str, str] | None) -> Attributes:
    """The attribute column as the table has it (a type it cannot read is found later)."""
    type_name = (types or {}).get(column, "")
    layout = Layout.JSON if type_name.startswith("JSON") else Layout.MAP
    return Attributes(column, layout)


def session_id(own: Attributes, resource: Attributes, keys: Sequence[str]) -> Expr:
    """The first present of the session keys in the event's own attributes, then the resource's."""
    values = [own.value(k) for k in keys] + [resource.value(k) for k in keys]
    return Expr(first_non_empty(values), (own.column, resource.column))


def _types(own: str, extra: Mapping[str, ColumnType]) -> dict[str, ColumnType]:
    return {
        "Timestamp": TIME,
        "ServiceName": STRING,
        own: ATTRIBUTES,
        "ResourceAttributes": ATTRIBUTES,
        **extra,
    }


def logs_preset(types: Mapping[str, str] | None, session_keys: Sequence[str]) -> Preset:
    """The otel_logs preset for a table with these column types (None: the current layout)."""
    present = set(types) if types is not None else {"EventName"}
    log = attributes("LogAttributes", types)
    resource = attributes("ResourceAttributes", types)
    name = log.value("event.name")
    ts_filter = Expr(f"Timestamp >= {LB} AND Timestamp < {AT}", ("Timestamp",))
    if "TimestampTime" in present:
        # The versions with TimestampTime lead their sort key with it: filtering on it
        # too lets ClickHouse skip granules.
        ts_filter = Expr(
            "TimestampTime >= toDateTime(intDiv({lb_ms:Int64}, 1000), 'UTC')"
            " AND TimestampTime <= toDateTime(intDiv({at_ms:Int64}, 1000), 'UTC')"
            f" AND Timestamp >= {LB} AND Timestamp < {AT}",
            ("Timestamp", "TimestampTime"),
        )
    event_id = log.value("event.id")
    return Preset(
        name="otel_logs",
        columns={
            "event_id": Expr(
                f"if({event_id} != '', {event_id},"
                " hex(cityHash64(Timestamp, ServiceName, Body, TraceId, SpanId,"
                f" {log.text()}, {resource.text()})))",
                (*ROW_COLUMNS, "LogAttributes", "ResourceAttributes"),
            ),
            "ts": Expr("toDateTime64(Timestamp, 3, 'UTC')", ("Timestamp",)),
            "session_id": session_id(log, resource, session_keys),
            # Older versions have no EventName: the name is an attribute there.
            "name": Expr(f"if(EventName != '', EventName, {name})", ("EventName", "LogAttributes"))
            if "EventName" in present
            else Expr(name, ("LogAttributes",)),
            "latency_ms": Expr(
                f"coalesce(toFloat64OrNull({log.value('latency_ms')}),"
                f" toFloat64OrNull({log.value('duration_ms')}))",
                ("LogAttributes",),
            ),
            "trigger": Expr(log.value("trigger"), ("LogAttributes",)),
            "result_count": Expr(f"toInt64OrNull({log.value('result_count')})", ("LogAttributes",)),
            "payload": Expr(log.payload(), ("LogAttributes",)),
        },
        ts_filter=ts_filter,
        latency_unparsable=Expr(_unparsable(log.value("latency_ms")), ("LogAttributes",)),
        dimensions={
            "ServiceName": Expr("ServiceName", ("ServiceName",)),
            "SeverityText": Expr("SeverityText", ("SeverityText",)),
        },
        event_id_hint=Expr(event_id, ("LogAttributes",)),
        attribute=Attribute(log.value, ("LogAttributes",)),
        # The JSON layout's payload is built as an object; the Map layout's serialises to
        # one unless a key or value is not UTF-8 (see Attributes.utf8).
        payload_object=Expr(log.utf8() if log.layout is Layout.MAP else "1", ("LogAttributes",)),
        payload_utf8=Expr(log.utf8(), ("LogAttributes",)),
        types=_types(
            "LogAttributes",
            {"EventName": STRING, "TimestampTime": TIME, "Body": STRING}
            | {"TraceId": STRING, "SpanId": STRING},
        ),
    )


TRACE_FAILED = "StatusCode IN ('Error', 'STATUS_CODE_ERROR')"


def traces_preset(types: Mapping[str, str] | None, session_keys: Sequence[str]) -> Preset:
    """The otel_traces preset: a span yields `<SpanName>.started` and `.completed`/`.failed`."""
    span = attributes("SpanAttributes", types)
    resource = attributes("ResourceAttributes", types)
    return Preset(
        name="otel_traces",
        # The start event at the span's start, the outcome at its end with the
        # span's duration as latency.
        columns={
            "event_id": Expr("concat(SpanId, if(_phase = 0, ':start', ':end'))", ("SpanId",)),
            "ts": Expr(
                "toDateTime64(if(_phase = 0, Timestamp,"
                " Timestamp + toIntervalNanosecond(Duration)), 3, 'UTC')",
                ("Timestamp", "Duration"),
            ),
            "session_id": session_id(span, resource, session_keys),
            "name": Expr(
                "concat(SpanName, if(_phase = 0, '.started',"
                f" if({TRACE_FAILED}, '.failed', '.completed')))",
                ("SpanName", "StatusCode"),
            ),
            "latency_ms": Expr("if(_phase = 1, Duration / 1e6, NULL)", ("Duration",)),
            "trigger": Expr(span.value("trigger"), ("SpanAttributes",)),
            "result_count": Expr(
                f"toInt64OrNull({span.value('result_count')})", ("SpanAttributes",)
            ),
            "payload": Expr(span.payload(), ("SpanAttributes",)),
        },
        ts_filter=Expr(f"Timestamp >= {LB} AND Timestamp < {AT}", ("Timestamp",)),
        array_join="ARRAY JOIN [0, 1] AS _phase",
        dimensions={
            "ServiceName": Expr("ServiceName", ("ServiceName",)),
            "StatusMessage": Expr("StatusMessage", ("StatusMessage",)),
        },
        attribute=Attribute(span.value, ("SpanAttributes",)),
        payload_object=Expr(span.utf8() if span.layout is Layout.MAP else "1", ("SpanAttributes",)),
        payload_utf8=Expr(span.utf8(), ("SpanAttributes",)),
        types=_types(
            "SpanAttributes",
            {"SpanId": STRING, "SpanName": STRING, "StatusCode": STRING, "Duration": INTEGER},
        ),
    )
