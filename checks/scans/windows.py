"""How a scan meets its windows: one window bound as parameters, or many judged in one pass.

A check judges one window `[ws, at)`, read from `lb` (`checks.base.Window`).
A backtest (and the daemon's catch-up) judges many, and each scan then reads
the events of all of them once (`Windows`): a row of the events belongs to
every window whose range holds its time, the figures compare times with the
bounds of the row's window (the columns `WS`, `AT`, `LB` of
`checks.scans.binder`), and the totals come back one row per window, keyed
by its index `_w` (1 for the oldest). The window and deviation scans write
their SQL against `Windowing`, which says how: `ONE` (nothing to add: the
bounds are bound parameters) or `Many`. The session scan has a rendering
of its own for many windows (`checks.scans.per_window`). The pass and what
it costs: docs/performance.md#backtest-one-pass-over-a-period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from checks.base import Window
from watchdog.core.times import to_ms


@dataclass(frozen=True)
class Windows:
    """The windows of one pass, by end (oldest first), and the span that holds their reads."""

    windows: tuple[Window, ...]

    def __post_init__(self) -> None:
        if not self.windows:
            raise ValueError("a pass judges at least one window")
        ends = [w.at for w in self.windows]
        if ends != sorted(set(ends)):
            raise ValueError("the windows of a pass end at distinct times, oldest first")

    def __len__(self) -> int:
        return len(self.windows)

    def sized(self, length_ms: int | None) -> Windows:
        """The same windows, each `length_ms` long (None: as they are), as one check sees them."""
        return Windows(tuple(w.sized(length_ms) for w in self.windows))

    @property
    def span(self) -> Window:
        """One window reading what every window reads: from the earliest lookback to the last end."""
        at = self.windows[-1].at
        start = min(w.start for w in self.windows)
        read_from = min(w.read_from for w in self.windows)
        return Window(at=at, length=at - start, lookback=at - read_from)

    def bounds(self) -> tuple[list[int], list[int], list[int]]:
        """Each window's start, end and lookback start, in epoch milliseconds."""
        return (
            [to_ms(w.start) for w in self.windows],
            [to_ms(w.at) for w in self.windows],
            [to_ms(w.read_from) for w in self.windows],
        )

    def params(self) -> dict[str, Any]:
        """The windows' bounds (`bt_ws`, `bt_at`, `bt_lb`); the span's are the context's window."""
        ws, at, lb = self.bounds()
        return {"bt_ws": ws, "bt_at": at, "bt_lb": lb}


def empty(window: Window) -> Window:
    """A window holding nothing, ending where `window` does: a scan over it reads no row.

    A pass gets no row back for a window its scan found nothing in; the
    scan run over an empty window gives the row an evaluation of nothing
    has (a count of 0, an empty list), the same for every such window.
    """
    return Window(at=window.at, length=timedelta(0), lookback=timedelta(0))


class Windowing(Protocol):
    """How a scan's SQL meets its windows (the window and deviation scans write against it).

    `key` prefixes a SELECT list (the window index `_w`, or nothing);
    `holding(t)` / `reading(t)` are an ARRAY JOIN adding `_w` to a row at
    time `t`, a row for each window whose range (`[ws, at)`) or read range
    (`[lb, at)`) holds it; `keys(...)` are the given grouping keys with
    `_w`; `group(...)` groups by them; `keyed(column)` is `column` paired
    with its row's window. With one window, the rows are those of the bound
    window and there is no `_w`.
    """

    @property
    def key(self) -> str: ...

    def holding(self, t: str) -> str: ...

    def reading(self, t: str) -> str: ...

    def keys(self, *keys: str) -> str: ...

    def group(self, *keys: str) -> str: ...

    def keyed(self, column: str) -> str: ...

    def params(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class One:
    """One window: its bounds are the bound parameters, the rows read are its own."""

    key: str = ""

    def holding(self, t: str) -> str:
        return ""

    def reading(self, t: str) -> str:
        return ""

    def keys(self, *keys: str) -> str:
        return ", ".join(keys)

    def group(self, *keys: str) -> str:
        return f"GROUP BY {', '.join(keys)}" if keys else ""

    def keyed(self, column: str) -> str:
        return column

    def params(self) -> dict[str, Any]:
        return {}


ONE = One()


@dataclass(frozen=True)
class Many:
    """Many windows in one pass: a row belongs to each window whose range holds its time."""

    windows: Windows
    key: str = "_w, "

    def _tag(self, t: str, start: str) -> str:
        n = len(self.windows)
        inside = f"{t} >= {{{start}:Array(Int64)}}[i] AND {t} < {{bt_at:Array(Int64)}}[i]"
        return f"ARRAY JOIN arrayFilter(i -> {inside}, range(1, {n + 1})) AS _w"

    def holding(self, t: str) -> str:
        return self._tag(t, "bt_ws")

    def reading(self, t: str) -> str:
        return self._tag(t, "bt_lb")

    def keys(self, *keys: str) -> str:
        return ", ".join(("_w", *keys))

    def group(self, *keys: str) -> str:
        return f"GROUP BY {self.keys(*keys)}"

    def keyed(self, column: str) -> str:
        return f"({column}, _w)"

    def params(self) -> dict[str, Any]:
        return self.windows.params()
