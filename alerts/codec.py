"""One table of the watchdog's own, and the codec between its rows and one dataclass: the
DDL, the row to insert, the select list and the value read back all come from the dataclass's
fields and their types (`Codec`; the tables: alerts.state, docs/alerts.md#where-the-state-lives)."""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from watchdog.core import jsontext
from watchdog.core.times import from_ms

T = TypeVar("T")
TS = "DateTime64(3, 'UTC')"


@dataclass(frozen=True)
class Table:
    """A table of the watchdog's database: its columns and the rest of its DDL."""

    name: str
    columns: Mapping[str, str]  # name -> ClickHouse type, in DDL order
    tail: str  # ORDER BY, TTL
    added: tuple[str, ...] = ()  # columns added after the table was first released

    def ddl(self, qualified: str) -> str:
        body = ",\n".join(f"    {col} {typ}" for col, typ in self.columns.items())
        return (
            f"CREATE TABLE IF NOT EXISTS {qualified}\n(\n{body}\n)\n"
            f"ENGINE = ReplacingMergeTree(version)\n{self.tail}"
        )


def select_list(columns: Mapping[str, str]) -> str:
    """Columns to select, times as epoch milliseconds (read back by `Codec.decode`)."""
    return ", ".join(
        f"toUnixTimestamp64Milli({col}) AS {col}" if "DateTime64" in typ else col
        for col, typ in columns.items()
    )


def utc(moment: datetime | None) -> datetime | None:
    return moment.astimezone(UTC) if moment is not None else None


def _optional(hint: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (hint, False)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _converters(hint: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(encode, decode) for one field type; see the module docstring."""
    inner, optional = _optional(hint)
    origin = typing.get_origin(inner) or inner
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    if inner is datetime:
        encode, decode = utc, lambda v: from_ms(int(v))
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        encode, decode = (lambda v: v.value), inner
    elif origin is tuple:
        encode, decode = list, lambda v: tuple(str(x) for x in v)
    elif origin in (Mapping, dict, typing.Mapping):
        encode = lambda v: jsontext.dumps(v, ensure_ascii=False, sort_keys=True)  # noqa: E731
        decode = lambda v: json.loads(v or "{}")  # noqa: E731
    elif inner in (str, int, float):
        encode, decode = (lambda v: v), inner
    else:
        raise TypeError(f"no column conversion for a field of type {hint!r}")
    if not optional:
        return encode, decode
    return (
        lambda v: None if v is None else encode(v),
        lambda v: None if v is None else decode(v),
    )


@dataclass(frozen=True)
class Codec(Table, Generic[T]):
    """A table whose rows are the dataclass `model` (plus the columns in `extras`).

    The columns are the dataclass's fields (plus `extras`, written beside it, such
    as when the row was written), checked when the codec is made; each field is
    converted by its type: a `datetime` written aware in UTC and read back from
    epoch milliseconds (`select` asks for them, so no client time zone can shift
    it), a `StrEnum` by its value, a `tuple[str, ...]` as `Array(String)`, a
    `Mapping` as JSON text with sorted keys, `str`, `int` and `float` as they are;
    `None` stays `None` (a `Nullable` column). A column a table lacks (read-only
    callers before its migration) leaves the field at its default.
    """

    model: type[T] = field(kw_only=True)
    extras: tuple[str, ...] = ()
    _fields: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = field(
        default_factory=dict, repr=False
    )

    def __post_init__(self) -> None:
        if not is_dataclass(self.model):
            raise TypeError(f"{self.name}: a codec needs a dataclass")
        hints = typing.get_type_hints(self.model)
        names = [f.name for f in fields(self.model)]
        expected = set(names) | set(self.extras)
        if expected != set(self.columns):
            raise TypeError(
                f"{self.name}: the columns and {self.model.__name__}'s fields differ:"
                f" {sorted(expected ^ set(self.columns))}"
            )
        object.__setattr__(self, "_fields", {n: _converters(hints[n]) for n in names})

    def row(self, item: T, **extras: Any) -> list[Any]:
        """The values to insert, in column order (`extras` give the columns beside the model)."""
        values = []
        for column in self.columns:
            if column in self._fields:
                encode, _ = self._fields[column]
                values.append(encode(getattr(item, column)))
            else:
                values.append(extras[column])
        return values

    def decode(self, row: Mapping[str, Any]) -> T:
        """The dataclass of a row read with `select` (a column it lacks keeps the default)."""
        values = {
            name: decode(row[name]) for name, (_, decode) in self._fields.items() if name in row
        }
        return self.model(**values)

    def select(self, columns: Mapping[str, str] | None = None) -> str:
        return select_list(self.columns if columns is None else columns)
