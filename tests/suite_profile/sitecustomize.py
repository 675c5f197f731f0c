"""Loaded by every Python process started with this directory on PYTHONPATH (`site` imports
`sitecustomize`): at its exit, the process appends one JSON line to `$SUITE_PROFILE` with its
CPU seconds (user + system, its own, not its children's), its wall seconds, the test it ran
under (`PYTEST_CURRENT_TEST`, which pytest sets and a test's subprocesses inherit), the
xdist worker and the start of its command line. A process killed by a signal writes nothing.
Summarized by `python -m tests.suite_profile` (docs/development.md#where-the-suites-cpu-goes).
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import time

_STARTED = time.monotonic()


def _record() -> None:
    path = os.environ.get("SUITE_PROFILE")
    if not path:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    line = {
        "pid": os.getpid(),
        "cpu": used.ru_utime + used.ru_stime,
        "wall": time.monotonic() - _STARTED,
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        "argv": [word[:200] for word in sys.argv[:4]],
    }
    try:
        with open(path, "a", encoding="utf-8") as out:  # one short write: lines stay whole
            out.write(json.dumps(line) + "\n")
    except OSError:
        pass


atexit.register(_record)
