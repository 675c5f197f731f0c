"""Attribute values become the strings the Collector's ClickHouse exporter writes (pdata's AsString)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from watchdog.daemon.ingest.values import as_string, attributes, go_float


def value(**kind: object) -> AnyValue:
    return AnyValue(**kind)  # type: ignore[arg-type]


def kv(key: str, v: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=v)


def test_scalars_as_go_writes_them() -> None:
    """Strings as they are, ints in decimal, bools as true/false, bytes in base64, empty as ""."""
    assert as_string(value(string_value="a b")) == "a b"
    assert as_string(value(int_value=-42)) == "-42"
    assert as_string(value(bool_value=True)) == "true"
    assert as_string(value(bool_value=False)) == "false"
    assert as_string(value(bytes_value=b"\x00\xffhi")) == "AP9oaQ=="
    assert as_string(AnyValue()) == ""


def test_doubles_in_go_json_number_form() -> None:
    """Whole doubles lose their .0; exponents only below 1e-6 and from 1e21, with Go's digits."""
    cases = {
        1.0: "1",
        812.0: "812",
        0.25: "0.25",
        -3.5: "-3.5",
        1e20: "100000000000000000000",
        1e21: "1e+21",
        1.5e300: "1.5e+300",
        1e-6: "0.000001",
        1e-7: "1e-7",
        2.5e-10: "2.5e-10",
        0.1 + 0.2: "0.30000000000000004",
        -0.0: "-0",
    }
    assert {x: as_string(value(double_value=x)) for x in cases} == cases


def test_nan_and_infinities_as_pdata_words_them() -> None:
    """A NaN or infinite double: the text pdata's AsString gives (its JSON encoder's error)."""
    assert as_string(value(double_value=math.nan)) == "json: unsupported value: NaN"
    assert as_string(value(double_value=math.inf)) == "json: unsupported value: +Inf"
    assert as_string(value(double_value=-math.inf)) == "json: unsupported value: -Inf"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_go_float_reads_back_as_the_same_double(x: float) -> None:
    """Go's shortest form loses nothing: parsed back, it is the same float64."""
    assert float(go_float(x)) == x


def test_arrays_and_maps_as_go_json() -> None:
    """Arrays and maps: json.Marshal's form (keys sorted, no spaces, <>& escaped, numbers Go's)."""
    nested = value(
        kvlist_value={
            "values": [
                kv("z", value(double_value=2.0)),
                kv("a", value(array_value={"values": [value(string_value="<&>"), AnyValue()]})),
                kv("m", value(bytes_value=b"\x01")),
            ]
        }
    )
    assert as_string(nested) == '{"a":["\\u003c\\u0026\\u003e",null],"m":"AQ==","z":2}'
    array = value(array_value={"values": [value(int_value=1), value(bool_value=True)]})
    assert as_string(array) == "[1,true]"


def test_nan_inside_an_array_leaves_it_empty() -> None:
    """json.Marshal refuses NaN: the exporter stores the empty string it then gets."""
    array = value(array_value={"values": [value(double_value=math.nan)]})
    assert as_string(array) == ""


def test_repeated_key_keeps_the_last_value() -> None:
    """A key given twice: the last value wins, as the exporter's map does."""
    pairs = [kv("k", value(string_value="first")), kv("k", value(int_value=2))]
    assert attributes(pairs) == {"k": "2"}


def test_empty_string_value_stays_empty() -> None:
    """An attribute whose value is the empty string is stored as ""."""
    assert attributes([kv("k", value(string_value=""))]) == {"k": ""}
