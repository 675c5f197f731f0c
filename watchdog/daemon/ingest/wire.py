"""Bounding what decoding a request builds, before it is decoded (docs/performance.md#the-receiver-under-abuse).

On the bytes: the records of a protobuf request (a walk of the wire format
that stops at the first record past the limit), its messages (an upper bound
at C speed, an exact walk by the descriptors only past it), and the objects
and arrays of a JSON one; `Malformed` for a body that is no request,
`TooMany` past a limit. Each walk visits a bounded number of fields, however
the bytes are made (zeros are field number 0, which protobuf has not; a run
of millions of tiny fields is more than the records may hold), so what a
refused body costs in CPU stays small too.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterator
from typing import Any

# Objects and arrays of a JSON request, or messages of a protobuf one, allowed per record
# allowed, beyond a base: a record with its body and ten string attributes is about 23.
CONTAINERS_PER_RECORD = 32
CONTAINERS_BASE = 10_000
# The first byte of a length-delimited field's key, fields 1-15, and the continuation bytes
# of the keys of fields 16 and up: every message field starts with one of them.
_MESSAGE_KEY_BYTES = [bytes([n << 3 | 2]) for n in range(1, 16)] + [
    bytes([b]) for b in range(0x80, 0x100) if b & 7 == 2
]

# Fields the records walk may visit around the records (resources, scopes, their names and
# attributes' envelopes, unknown fields), per record allowed and beyond a base.
FIELDS_PER_RECORD = 4
# Fields the exact messages walk may visit per message allowed: a message's scalar fields too.
FIELDS_PER_MESSAGE = 2

_LEN = 2
_ONE, _TWO = frozenset({1}), frozenset({2})
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class Malformed(Exception):
    """The body is not a well-formed request (HTTP 400)."""


class TooMany(Exception):
    """The body holds more than a limit allows (HTTP 413)."""


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while at < end and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise Malformed("a varint runs past its message")


class _Budget:
    """Fields a walk may still visit; TooMany once it has visited more."""

    __slots__ = ("left", "what")

    def __init__(self, fields: int, what: str) -> None:
        self.left, self.what = fields, what


def _fields(
    data: bytes, start: int, end: int, budget: _Budget, wanted: Container[int]
) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in data[start:end] whose number
    is `wanted`, in order; every field visited, of any type, is taken from `budget`."""
    at = start
    while at < end:
        budget.left -= 1
        if budget.left < 0:
            raise TooMany(budget.what)
        key = data[at]  # most keys and lengths are one byte: read those inline
        if key < 0x80:
            at += 1
        else:
            key, at = _varint(data, at, end)
        if key < 8:  # field number 0: no protobuf message has one (zeros read as such)
            raise Malformed("field number 0 (not protobuf)")
        kind = key & 7
        if kind == _LEN:
            if at >= end:
                raise Malformed("a field runs past its message")
            size = data[at]
            if size < 0x80:
                at += 1
            else:
                size, at = _varint(data, at, end)
            if at + size > end:
                raise Malformed("a field runs past its message")
            if key >> 3 in wanted:
                yield key >> 3, at, at + size
            at += size
        elif kind == 0:
            _, at = _varint(data, at, end)
        elif kind == 1:
            at += 8
        elif kind == 5:
            at += 4
        else:
            raise Malformed(f"wire type {kind} where an OTLP request has none")
        if at > end:
            raise Malformed("a field runs past its message")


def protobuf_records(body: bytes, limit: int) -> int:
    """The log records or spans in a binary export request; TooMany at the first past `limit`."""
    # Both export requests have one shape: resource_logs/resource_spans = 1, in each
    # scope_logs/scope_spans = 2, in each log_records/spans = 2.
    count = 0
    allowed = CONTAINERS_BASE + FIELDS_PER_RECORD * limit
    budget = _Budget(allowed, f"more than {allowed} fields around {limit} records")
    for _, start, end in _fields(body, 0, len(body), budget, _ONE):
        for _, scope_start, scope_end in _fields(body, start, end, budget, _TWO):
            for _ in _fields(body, scope_start, scope_end, budget, _TWO):
                count += 1
                if count > limit:
                    raise TooMany(f"more than {limit} records in one request")
    return count


def allowed_containers(records: int) -> int:
    """The objects and arrays (JSON), or messages (protobuf), that `records` records may hold."""
    return CONTAINERS_BASE + CONTAINERS_PER_RECORD * records


def protobuf_messages(body: bytes, descriptor: Any, limit: int) -> int:
    """At least the messages in `body` (of `descriptor`'s type); TooMany past what `limit`
    records may hold. Exact when the body is walked; a cheap upper bound otherwise."""
    allowed = allowed_containers(limit)
    bound = sum(body.count(key) for key in _MESSAGE_KEY_BYTES)
    if bound <= allowed:
        return bound
    count = 0
    visits = FIELDS_PER_MESSAGE * allowed
    budget = _Budget(visits, f"more than {visits} fields in one request")
    # Depth first, one generator of fields per open message: memory as deep as the nesting.
    children = _children(descriptor)
    stack = [(children, _fields(body, 0, len(body), budget, children))]
    while stack:
        children, fields = stack[-1]
        for number, field_start, field_end in fields:
            child = children[number]
            count += 1
            if count > allowed:
                raise TooMany(f"more than {allowed} messages in one request")
            grandchildren = _children(child)
            stack.append(
                (grandchildren, _fields(body, field_start, field_end, budget, grandchildren))
            )
            break
        else:
            stack.pop()
    return count


_SCHEMA: dict[str, dict[int, Any]] = {}


def _children(descriptor: Any) -> dict[int, Any]:
    """Field number -> message descriptor, for the message fields of `descriptor`."""
    found = _SCHEMA.get(descriptor.full_name)
    if found is None:
        found = {f.number: f.message_type for f in descriptor.fields if f.message_type is not None}
        _SCHEMA[descriptor.full_name] = found
    return found


def json_containers(body: bytes, limit: int) -> int:
    """Objects and arrays in a JSON body (outside strings); TooMany past what `limit` records hold."""
    allowed = allowed_containers(limit)
    containers = body.count(b"{") + body.count(b"[")  # strings included: at least as many
    if containers <= allowed:
        return containers
    bare = _STRINGS.sub(b"", body)
    containers = bare.count(b"{") + bare.count(b"[")
    if containers > allowed:
        raise TooMany(
            f"{containers} objects and arrays in one request; {limit} records may hold {allowed}"
        )
    return containers
