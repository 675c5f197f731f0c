"""`python -m tests.docs_cli ARGS`: memory-watchdog as the doc examples run it.

The same command line as `memory-watchdog ARGS`, with two things fixed so
that an example prints the same text on every run: the wall clock (every
command runs at `DOCS_NOW`, which `status`, `silence` and the outbox read;
evaluation times come from `--at` as usual) and the ids `silence add`
draws (derived from the command line instead of `secrets`). Both are set
before the CLI is imported, so every module binds the fixed ones.
Everything else is the real program. Used by `tests.docs_examples` only.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from datetime import UTC, datetime
from itertools import count

import watchdog.core.times as times

# The wall clock of every doc example: an hour after the demo's evaluation time.
DOCS_NOW = datetime(2026, 11, 28, 5, 5, tzinfo=UTC)

_draws = count()


def _fixed_clock() -> datetime:
    return DOCS_NOW


def _repeatable_token_hex(nbytes: int | None = None) -> str:
    """What `secrets.token_hex` returns, derived from the command line and a counter."""
    seed = f"{sys.argv[1:]}|{next(_draws)}".encode()
    return hashlib.sha256(seed).hexdigest()[: 2 * (nbytes or 32)]


def main() -> int:
    times.system_clock = _fixed_clock
    secrets.token_hex = _repeatable_token_hex
    from watchdog.cli.main import main as cli  # after the two lines above, on purpose

    return cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
