"""The server's words of a store error, as a config or schema error names them: its first line,
without the query text ClickHouse echoes after it (docs/configuration.md#validation).
"""

from __future__ import annotations

import re

# A syntax error quotes the query from the failing token on: keep the token and what the
# parser expected instead (its position is in the watchdog's query, not in the config).
_SYNTAX = re.compile(r"Syntax error: failed at position \d+ \((.*?)\).*?(Expected [^.]*)", re.S)
# Where the server starts echoing the query, our settings or its stack after its words.
_ECHOES = (
    " In scope ",
    ": while executing",
    ". Stack trace",
    " SETTINGS max_execution_time",
    " (line ",
)
MAX_SERVER_WORDS = 240


def server_words(problem: str) -> str:
    """The first line of the server's words, without the query text it quotes after them."""
    text = problem.strip().splitlines()[0] if problem.strip() else problem
    syntax = _SYNTAX.search(text)
    if syntax:
        return f"syntax error at {syntax.group(1)}: {syntax.group(2)}"
    for cut in _ECHOES:
        text = text.split(cut, 1)[0]
    text = re.sub(r"\s*\(version [^)]*\)", "", " ".join(text.split()))
    return text if len(text) <= MAX_SERVER_WORDS else text[: MAX_SERVER_WORDS - 1] + "…"
