"""`python -m tests.suite_profile PROFILE.jsonl [N]`: the suite's CPU by process and by test file.

Run the suite with `SUITE_PROFILE=<file> PYTHONPATH=tests/suite_profile` (every Python process
it starts then records itself at exit: tests/suite_profile/sitecustomize.py), then this: the
pytest processes' own CPU (the in-process tests, the embedded engine's queries included), the
CPU of the processes the tests started, by test file and by command, the N largest.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def _command(argv: list[str]) -> str:
    if argv and argv[0].endswith("memory-watchdog"):
        return f"memory-watchdog {argv[1]}" if len(argv) > 1 else "memory-watchdog"
    if argv[:1] == ["-c"]:
        return "python -c"
    return Path(argv[0]).name if argv else "?"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    shown = int(argv[1]) if len(argv) > 1 else 25
    lines = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line]
    runners = [r for r in lines if not r["test"]]
    started = [r for r in lines if r["test"]]
    by_file: Counter[str] = Counter()
    count: Counter[str] = Counter()
    by_command: Counter[str] = Counter()
    for r in started:
        name = r["test"].split("::")[0]
        by_file[name] += r["cpu"]
        count[name] += 1
        by_command[_command(r["argv"])] += r["cpu"]
    print(f"pytest and other processes outside a test: {sum(r['cpu'] for r in runners):.0f} CPU-s")
    for r in sorted(runners, key=lambda r: -r["cpu"])[:6]:
        what = "pytest worker" if r["worker"] else _command(r["argv"])
        print(f"  {r['cpu']:8.1f}  {r['worker'] or '-':5} {what}")
    print(
        f"processes the tests started: {len(started)}, {sum(r['cpu'] for r in started):.0f} CPU-s"
    )
    print("  by test file (CPU-s, processes):")
    for name, cpu in by_file.most_common(shown):
        print(f"  {cpu:8.1f} {count[name]:5d}  {name}")
    print("  by command (CPU-s):")
    for name, cpu in by_command.most_common(shown):
        print(f"  {cpu:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
