"""Text from the data, made safe for a terminal, a log or a mail: one function for every output.

Control and bidirectional characters are escaped and long values cut, so no id can rewrite the
screen or fill it (docs/guarantees.md#hardening-round-2-what-an-attacker-and-bad-luck-broke).
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return match.group(0).encode("unicode_escape").decode("ascii")


def printable(value: object, limit: int | None = 200) -> str:
    """`value` as text a terminal shows as it is: controls escaped (`\\x1b`, `\\r`), cut at `limit`.

    An ESC sequence in a session id cannot recolour or rewrite the screen, a
    carriage return cannot hide the rest of a line, and a 1 MB id does not
    fill the terminal: it is cut with `…`.
    """
    text = _CONTROL.sub(_escape, "" if value is None else str(value))
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def plural(count: int, noun: str) -> str:
    """`1 failure`, `2 failures`: a count with its noun in the right number (regular nouns)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
