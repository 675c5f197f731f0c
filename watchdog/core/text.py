"""Text from the data, made safe for a terminal, a log or a mail: one function for every output.

Control and bidirectional characters are escaped and long values cut, so no id can rewrite the
screen or fill it (docs/guarantees.md#hardening-round-2-what-an-attacker-and-bad-luck-broke).
"""

from __future__ import annotations

import re
import shlex

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


def shell_word(value: str) -> str:
    """`value` as one word for bash that a terminal shows as it is and bash reads back byte for
    byte, for the commands the program prints (`memory-watchdog explain <session id>`).

    Bare when no character needs quoting, in single quotes when every character is printable
    (`shlex.quote`), else in ANSI-C quotes, `$'...'`: each control, bidirectional or
    undecodable character as the `\\xHH` escapes of its UTF-8 bytes (so the locale does not
    matter), a backslash as `\\\\`, a quote as `\\'`; one line, however many newlines.
    A NUL cannot be in a command-line argument at all: it shows as `\\x00`, and bash's
    `$'...'` ends the argument there.
    """
    if not _CONTROL.search(value) and not _UNDECODABLE.search(value):
        return shlex.quote(value)
    return "$'" + "".join(_ansi_c(char) for char in value) + "'"


# Lone surrogates: bytes that were not UTF-8 (`surrogateescape`), or text no encoder can write.
_UNDECODABLE = re.compile("[\ud800-\udfff]")


def _ansi_c(char: str) -> str:
    """One character inside `$'...'`."""
    if char in "\\'":
        return "\\" + char
    if _CONTROL.fullmatch(char) or _UNDECODABLE.fullmatch(char):
        raw = char.encode(
            "utf-8", "surrogateescape" if "\udc80" <= char <= "\udcff" else "surrogatepass"
        )
        return "".join(f"\\x{byte:02x}" for byte in raw)
    return char


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 failure`, `2 failures`: a count with its noun in the right number (`many`: the plural
    of a noun that does not take an s, `passes`)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {many or noun + 's'}"
