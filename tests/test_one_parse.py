"""joelclaw's metadata is parsed once per event, and reads as it did field by field.

The preset extracts every field the scans read (session ids, latency, result
count, trigger) with one `JSONExtract` into a named tuple. The expressions it
replaced, one parse per field, are kept here as the oracle: on every
malformed input we know of (and on generated JSON), each normalized column and
each data-quality flag is what they gave.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.presets import JOELCLAW
from watchdog.core.store import Store


def _readable(extract: str) -> str:
    return (
        f"if(isValidUTF8(metadata_json), {extract.format(m='metadata_json')},"
        f" {extract.format(m='toValidUTF8(metadata_json)')})"
    )


_SID = _readable("JSONExtractString({m}, 'session_id')")
_SID_WORKERS = _readable("JSONExtractString({m}, 'sessionId')")
_RAW = _readable("JSONExtractRaw({m}, 'latency_ms')")
ORACLE = {
    "session_id": f"multiIf({_SID} != '', {_SID}, {_SID_WORKERS} != '', {_SID_WORKERS},"
    " ifNull(sessionId, ''))",
    "latency_ms": "coalesce("
    + _readable("JSONExtract({m}, 'latency_ms', 'Nullable(Float64)')")
    + ", toFloat64(duration_ms))",
    "result_count": _readable("JSONExtract({m}, 'result_count', 'Nullable(Int64)')"),
    "trigger": _readable("JSONExtractString({m}, 'trigger')"),
    "payload_object": f"({_SID} != '' OR {_SID_WORKERS} != ''"
    f" OR {_readable('JSONType({m})')} = 'Object')",
    "latency_unparsable": f"(({_RAW}) NOT IN ('', 'null')"
    f" AND toFloat64OrNull(replaceAll({_RAW}, '\"', '')) IS NULL)",
}

KNOWN = [
    '{"session_id": "s1", "latency_ms": 12.5, "result_count": 3, "trigger": "compaction"}',
    '{"session_id": 123, "latency_ms": "12.5", "result_count": "3", "trigger": 5}',
    '{"sessionId": "w1", "latency_ms": null, "result_count": null}',
    '{"session_id": "", "sessionId": "w2", "latency_ms": -1, "result_count": 2.7}',
    '{"session_id": "a", "session_id": "b", "latency_ms": "abc"}',
    '{"session_id": {"x": 1}, "latency_ms": [1], "result_count": 99999999999999999999}',
    '{"latency_ms": true, "result_count": true}',
    '{"latency_ms": false}',
    '{"latency_ms": "true"}',
    '{"latency_ms": "NaN"}',
    '{"latency_ms": "1e999"}',
    '{"latency_ms": 1e999}',
    '{"latency_ms": "  7 "}',
    '{"latency_ms": ""}',
    '{"latency_ms": "null"}',
    '{"latency_ms": {"a": 1}}',
    '{"latency_ms": -5}',
    '{"latency_ms": "-0.5"}',
    '{"latency_ms": "fast"}',
    '{"latency_ms": 1E3, "trigger": null}',
    '  {"session_id": "leading spaces"}',
    '\n\t{"session_id": "leading newline"}',
    '{"session_id": "caf\\u00e9", "trigger": "x\\"y"}',
    '{"nested": {"session_id": "n"}}',
    '{"session_id": "bad\\udcff"}',
    "[1, 2]",
    '["s", "t"]',
    '"just a string"',
    "42",
    "null",
    "not json",
    "",
    "{",
    '{"session_id": "truncated',
    "[" * 3000 + "]" * 3000,
    '{"session_id": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"session_id": "s", "query": "' + "x" * 100_000 + '", "latency_ms": 100}',
]
BYTES = [b'{"session_id": "s\xff\xfe", "latency_ms": 7}', b'{"sessionId": "\xc3", "trigger": "t"}']


def _new() -> dict[str, str]:
    preset = JOELCLAW
    return {
        "session_id": preset.columns["session_id"].sql,
        "latency_ms": preset.columns["latency_ms"].sql,
        "result_count": preset.columns["result_count"].sql,
        "trigger": preset.columns["trigger"].sql,
        "payload_object": preset.payload_object.sql,
        "latency_unparsable": preset.latency_unparsable.sql if preset.latency_unparsable else "",
    }


def _compare(store: Store, docs: list[str], raw: tuple[bytes, ...] = ()) -> None:
    new = _new()
    columns = ", ".join(
        f"toString({ORACLE[k]}) AS old_{k}, toString({new[k]}) AS new_{k}" for k in ORACLE
    )
    unhexed = ", ".join(f"unhex('{b.hex()}')" for b in raw)
    rows = store.query(
        f"SELECT metadata_json, {columns} FROM (SELECT arrayJoin(arrayConcat({{docs:Array(String)}},"
        f" [{unhexed}]))"
        " AS metadata_json, CAST(NULL AS Nullable(String)) AS sessionId,"
        " CAST(NULL AS Nullable(UInt32)) AS duration_ms)",
        {"docs": docs},
    ).rows
    for row in rows:
        doc, values = row[0], row[1:]
        for i, key in enumerate(ORACLE):
            old, now = values[2 * i], values[2 * i + 1]
            assert now == old, f"{key} of {str(doc)[:80]!r}: {now!r}, was {old!r}"


def test_every_known_malformed_metadata_reads_as_it_did(store: Store) -> None:
    """The inputs the data-quality tests pin, and more: each column as the field-by-field parses."""
    _compare(store, KNOWN, BYTES)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["12.5", "NaN", "inf", " 7", "1e999", "-3", "", "null", "true"]),
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=5)
_docs = st.dictionaries(
    st.sampled_from(["session_id", "sessionId", "latency_ms", "result_count", "trigger", "x"]),
    _values,
    max_size=5,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_docs, min_size=1, max_size=40))
def test_generated_metadata_reads_as_it_did(store: Store, docs: list[dict[str, Any]]) -> None:
    """Generated JSON objects: each column as the field-by-field parses gave it."""
    _compare(store, [json.dumps(d) for d in docs])
