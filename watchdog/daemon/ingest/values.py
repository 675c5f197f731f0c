"""OTLP attribute values as the Collector's ClickHouse exporter writes them: strings.

The exporter stores every attribute (and a log's body) as the string the
Collector's pdata gives for it (`pcommon.Value.AsString`): a string as it
is; an int in decimal; a double as Go's JSON encoder writes a number
(`1`, `0.25`, `1e+21`, `1e-7`); `true`/`false`; bytes in base64; an array
or a map as Go's `json.Marshal` writes it (keys sorted, no spaces, `<`, `>`,
`&`, U+2028 and U+2029 escaped); an empty value as "". The same strings
here mean the same rows as a Collector would have written
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

# What Go's json.Marshal escapes beyond what Python's json.dumps does (ensure_ascii=False).
_GO_HTML_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


class _Unsupported(Exception):
    """A value Go's json.Marshal refuses (NaN or an infinity inside an array or map)."""


def go_float(value: float) -> str:
    """A float64 as Go's JSON encoder (and so pdata's AsString) writes it: ES6 number form."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)  # the shortest digits that read back as `value`
    if "e" not in shortest:  # positional already (1e-4 <= |value| < 1e16): drop a ".0"
        return shortest[:-2] if shortest.endswith(".0") else shortest
    magnitude = abs(value)
    digits = Decimal(shortest)
    if magnitude < 1e-6 or magnitude >= 1e21:
        sign, numerals, exponent = digits.normalize().as_tuple()
        assert isinstance(exponent, int)
        text = "".join(str(n) for n in numerals)
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        power = exponent + len(text) - 1
        # Go writes at least two exponent digits, then drops the zero of e-0N.
        shown = f"{abs(power):02d}" if power >= 0 else str(abs(power))
        return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{shown}"
    return format(digits.normalize(), "f")


def _special_float(value: float) -> str:
    """What pdata's AsString gives for NaN and the infinities (its encoder's error text)."""
    shown = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return f"json: unsupported value: {shown}"


def as_string(value: AnyValue) -> str:
    """`value` as the exporter stores it (pcommon.Value.AsString)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return str(value.int_value)
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        number = value.double_value
        return _special_float(number) if not math.isfinite(number) else go_float(number)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in ("array_value", "kvlist_value"):
        try:
            return _go_json(_raw(value))
        except _Unsupported:  # json.Marshal fails, and the exporter keeps the empty result
            return ""
    return ""  # empty, or a profiles-only string index


def attributes(pairs: Iterable[KeyValue]) -> dict[str, str]:
    """An attribute list as the exporter's string map (a repeated key: the last one wins)."""
    out: dict[str, str] = {}
    for pair in pairs:
        value = pair.value
        # Nearly every attribute is a non-empty string: read it without asking the type.
        out[pair.key] = value.string_value or as_string(value)
    return out


def _raw(value: AnyValue) -> Any:
    """A value as pdata's AsRaw gives it, for json.Marshal."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        if not math.isfinite(value.double_value):
            raise _Unsupported
        return value.double_value
    if kind == "bytes_value":
        return value.bytes_value
    if kind == "array_value":
        return [_raw(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {pair.key: _raw(pair.value) for pair in value.kvlist_value.values}
    return None


def _go_json(raw: Any) -> str:
    """`raw` as Go's json.Marshal writes it."""
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return go_float(raw)
    if isinstance(raw, bytes):
        return '"' + base64.b64encode(raw).decode("ascii") + '"'
    if isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False).translate(_GO_HTML_ESCAPES)
    if isinstance(raw, list):
        return "[" + ",".join(_go_json(item) for item in raw) + "]"
    items = sorted(raw.items())
    return "{" + ",".join(f"{_go_json(key)}:{_go_json(item)}" for key, item in items) + "}"
