"""The examples in README.md and docs/*.md, produced by the program.

Every output shown in the docs is marked with the command that prints it, an
HTML comment (invisible on GitHub) right before its fenced block:

    <!-- example: memory-watchdog check --at 2026-11-28T04:00:00Z -->
    ```text
    ...what that command prints...
    ```

The commands run in one scratch directory, shown in the docs as `/tmp/demo`,
against a demo store made first by `DEMO_COMMAND`, with
`WATCHDOG_STORE_URL=chdb:///tmp/demo/store` and `XDG_DATA_HOME=/tmp/demo/data` (HOME and the
other XDG directories under `/tmp/demo/home`, so the user's files stay untouched)
set and the repository as the working directory. They run in the order of
`DOCS`, each file top to bottom, so an example sees what the ones before it
did (`check --notify` before `alerts`). The markers:

- `example: CMD`: the block is what CMD prints on stdout. `NAME=value CMD`
  sets environment variables for that command only (a secret a config
  references, say). `CMD 2>&1` shows
  stdout then stderr, `CMD 2>&1 >/dev/null` stderr only; `| head -n N` and
  `| tail -n N` keep the first or last lines, `| sed -n '/TEXT/,$p'` the
  lines from the first one containing TEXT (no regex characters), `| jq FILTER` a part of a JSON
  document (FILTER is `.`, `.key.key`, or `{key, key}`). When the block starts with `$ `, its
  first line shows the command.
- `run: CMD`: a step whose output is not shown (no block).
- `file: /tmp/demo/NAME`: the block is written to that file, for the
  commands after it (a config with a typo, say).
- `include: PATH`: the block is the file PATH of the repository, verbatim.

Commands run through `tests.docs_cli` (the real CLI at a fixed wall clock);
the scratch directory is replaced by `/tmp/demo` in what they print, and a
run's measured duration (`0.97s`) is compared as "some duration", so it does
not churn the docs.

    python -m tests.docs_examples           # exit 1 naming every example that differs
    python -m tests.docs_examples --write   # rewrite them in place (make docs)
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import docs_kinds
from tests.home_fence import Home

REPO = Path(__file__).resolve().parent.parent

# Every document with examples or links, in the order their examples run.
DOCS = (
    "README.md",
    "docs/spec.md",
    "docs/checks.md",
    "docs/configuration.md",
    "docs/sources.md",
    "docs/start-without-clickhouse.md",
    "docs/alerts.md",
    "docs/slo.md",
    "docs/operations.md",
    "docs/performance.md",
    "docs/guarantees.md",
    "docs/architecture.md",
    "docs/development.md",
)

DEMO_DIR = "/tmp/demo"
DEMO_AT = "2026-11-28T04:00:00Z"
DEMO_COMMAND = f"memory-watchdog demo --seed 0 --at {DEMO_AT} --store chdb://{DEMO_DIR}/store"

# Measured durations differ from run to run: compared as "some duration".
VOLATILE = (
    (re.compile(r" *\b\d+\.\d\ds\b"), " <seconds>"),
    (re.compile(r'"duration_s": [0-9.e-]+'), '"duration_s": <seconds>'),
)

MARKER = re.compile(r"^<!-- (example|run|file|include): (.+?) -->\s*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_BLOCK_KINDS = ("example", "file", "include")


class DocsError(Exception):
    """A marker the harness cannot use (no block after it, an unsupported command)."""


@dataclass(frozen=True)
class Block:
    """One marker and the fenced block after it (none for `run`)."""

    doc: str  # path relative to the repository
    line: int  # 1-based line of the marker
    kind: str  # example | run | file | include
    argument: str  # the command, or the path
    start: int = 0  # the block's content lines: [start, end), 0-based
    end: int = 0
    text: str = ""  # the block's content as the document has it

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} {self.kind}: {self.argument}"


def parse(doc: str, text: str) -> list[Block]:
    """The markers of one document, with their blocks (a marker inside a fenced block is text)."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opener = _FENCE.match(lines[i])
        if opener:  # a fenced block without a marker: skip it whole
            i = _closing(lines, i, opener.group(1), doc) + 1
            continue
        match = MARKER.match(lines[i])
        if not match:
            i += 1
            continue
        kind, argument = match.group(1), match.group(2).strip()
        if kind not in _BLOCK_KINDS:
            blocks.append(Block(doc, i + 1, kind, argument))
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        opener = _FENCE.match(lines[j]) if j < len(lines) else None
        if opener is None:
            raise DocsError(f"{doc}:{i + 1}: {kind} marker without a fenced block after it")
        k = _closing(lines, j, opener.group(1), doc)
        content = "".join(f"{line}\n" for line in lines[j + 1 : k])
        blocks.append(Block(doc, i + 1, kind, argument, j + 1, k, content))
        i = k + 1
    return blocks


def _closing(lines: Sequence[str], opening: int, fence: str, doc: str) -> int:
    """The index of the line closing the fenced block opened at `opening`."""
    k = opening + 1
    while k < len(lines) and lines[k].strip() != fence:
        k += 1
    if k == len(lines):
        raise DocsError(f"{doc}:{opening + 1}: fenced block never closed")
    return k


def collect(root: Path = REPO) -> list[Block]:
    """Every marker of `DOCS`, in run order."""
    found: list[Block] = []
    for doc in DOCS:
        path = root / doc
        if path.exists():
            found += parse(doc, path.read_text(encoding="utf-8"))
    return found


def normalized(text: str) -> str:
    """`text` with measured durations replaced, for comparing."""
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def same(shown: str, produced: str) -> bool:
    return normalized(shown) == normalized(produced)


# --- running commands ------------------------------------------------------------------


_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Command:
    """A marker's command line: the program's arguments, which streams to show, a filter."""

    args: tuple[str, ...]
    streams: str  # stdout | both | stderr
    filter: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # NAME=value words before the program

    @classmethod
    def parse(cls, line: str) -> Command:
        words = shlex.split(line)
        env: list[tuple[str, str]] = []
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env.append((name, value))
        filter_: tuple[str, ...] = ()
        if "|" in words:
            at = words.index("|")
            words, filter_ = words[:at], tuple(words[at + 1 :])
        streams = "stdout"
        if words[-2:] == ["2>&1", ">/dev/null"]:
            streams, words = "stderr", words[:-2]
        elif words[-1:] == ["2>&1"]:
            streams, words = "both", words[:-1]
        if not words or words[0] != "memory-watchdog":
            raise DocsError(f"{line!r}: an example command starts with memory-watchdog")
        if any(w in ("|", ">", "2>", "2>&1", ">/dev/null") for w in words):
            raise DocsError(f"{line!r}: only `2>&1`, `2>&1 >/dev/null` and one `|` are supported")
        return cls(tuple(words[1:]), streams, filter_, tuple(env))


def jq(document: str, expression: str) -> str:
    """The part of a JSON document a small subset of jq selects, printed as jq prints it."""
    value: Any = json.loads(document)
    expression = expression.strip()
    if expression.startswith("{") and expression.endswith("}"):
        keys = [k.strip() for k in expression[1:-1].split(",")]
        value = {k: value[k] for k in keys}
    elif expression != ".":
        for key in expression.lstrip(".").split("."):
            value = value[key]
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def apply_filter(text: str, words: Sequence[str]) -> str:
    if not words:
        return text
    if words[0] == "jq" and len(words) == 2:
        return jq(text, words[1])
    if words[0] in ("head", "tail") and len(words) == 3 and words[1] == "-n":
        lines, n = text.splitlines(keepends=True), int(words[2])
        return "".join(lines[:n] if words[0] == "head" else lines[-n:])
    if words[0] == "sed" and len(words) == 3 and words[1] == "-n":
        match = re.fullmatch(r"/(.+)/,\$p", words[2])
        if match:  # from the first line containing the text (no regex characters) to the end
            lines = text.splitlines(keepends=True)
            found = [i for i, line in enumerate(lines) if match.group(1) in line]
            if not found:
                raise DocsError(f"{' '.join(words)!r}: no line contains {match.group(1)!r}")
            return "".join(lines[found[0] :])
    raise DocsError(
        f"unsupported filter {' '.join(words)!r}"
        " (jq FILTER, head -n N, tail -n N, sed -n '/TEXT/,$p')"
    )


# Variables of the caller's environment the examples never see: the watchdog's own, and
# the secrets the example configs reference (set per command with NAME=value instead).
_UNSET = ("WATCHDOG_", "OTEL_", "SLACK_", "ALERT_WEBHOOK_", "PAGERDUTY_")


class Scratch:
    """The scratch directory the examples run in, shown as /tmp/demo."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(_UNSET) and k not in ("COLUMNS", "LINES")
        }
        self.env.update(
            {
                **Home.under(directory / "home").env(),  # the user's files stay untouched
                "WATCHDOG_STORE_URL": f"chdb://{directory}/store",
                "XDG_DATA_HOME": f"{directory}/data",
                "COLUMNS": "80",  # argparse wraps --help to the terminal's width
                "PYTHONIOENCODING": "utf-8",
                "PYTHONPATH": str(REPO),
            }
        )

    def real(self, text: str) -> str:
        return text.replace(DEMO_DIR, str(self.dir))

    def shown(self, text: str) -> str:
        return text.replace(str(self.dir), DEMO_DIR)

    def run(self, line: str) -> str:
        """What the command prints, as the marker asks for it, with the scratch path shown."""
        command = Command.parse(line)
        done = subprocess.run(
            [sys.executable, "-m", "tests.docs_cli", *(self.real(a) for a in command.args)],
            cwd=REPO,
            env={**self.env, **{k: self.real(v) for k, v in command.env}},
            capture_output=True,
            text=True,
            encoding="utf-8",
            check=False,
        )
        if done.returncode not in (0, 1, 2, 3) or "Traceback" in done.stderr:
            raise DocsError(f"{line!r} crashed (exit {done.returncode}):\n{done.stderr}")
        out = {"stdout": done.stdout, "stderr": done.stderr, "both": done.stdout + done.stderr}
        return apply_filter(self.shown(out[command.streams]), command.filter)

    def write(self, path: str, text: str) -> None:
        if not path.startswith(f"{DEMO_DIR}/"):
            raise DocsError(f"file: {path}: files are written under {DEMO_DIR}/")
        target = Path(self.real(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


# Words of a command line that change what later commands print (alert state, silences,
# the demo's data). Between two of them, the same read-only command prints the same.
_WRITES = ("--notify", "add", "remove", "--yes", "demo")


def produce(blocks: Sequence[Block], scratch: Scratch, root: Path = REPO) -> dict[Block, str]:
    """Run every marker in order: what each example and include block should hold."""
    produced: dict[Block, str] = {}
    printed = {DEMO_COMMAND: scratch.run(DEMO_COMMAND)}
    for block in blocks:
        if block.kind == "file":
            scratch.write(block.argument, block.text)
            printed = {DEMO_COMMAND: printed[DEMO_COMMAND]}
        elif block.kind == "include":
            produced[block] = (root / block.argument).read_text(encoding="utf-8")
        else:
            output = printed.get(block.argument)
            if output is None:
                output = scratch.run(block.argument)
                if any(word in _WRITES for word in shlex.split(block.argument)):
                    printed = {DEMO_COMMAND: printed[DEMO_COMMAND]}
                else:
                    printed[block.argument] = output
            if block.kind == "example":
                produced[block] = (
                    f"$ {block.argument}\n{output}" if block.text.startswith("$ ") else output
                )
    return produced


@dataclass
class Session:
    """A scratch directory for one run of every example; removed on exit."""

    keep: bool = False

    def __enter__(self) -> Scratch:
        self._dir = Path(tempfile.mkdtemp(prefix="memory-watchdog-docs-"))
        return Scratch(self._dir)

    def __exit__(self, *exc: object) -> None:
        if not self.keep:
            shutil.rmtree(self._dir, ignore_errors=True)


def regenerate(root: Path = REPO) -> dict[Block, str]:
    """Every example and include block of `DOCS` as the program produces it now."""
    with Session() as scratch:
        return produce(collect(root), scratch, root)


# --- produced once per change, for every pytest worker ----------------------------------

# What the examples print depends on: the program and its templates, the repository files
# commands read or blocks include, this harness, the docs themselves, the project's metadata
# and the interpreter and packages it runs with. All of them go into the cache key.
INPUT_DIRS = ("watchdog", "checks", "alerts", "config")
INPUT_FILES = ("tests/docs_*.py", "tests/home_fence.py", "pyproject.toml", "*.md", "docs/*.md")
CACHE_DIR = REPO / ".cache" / "docs-examples"  # ignored by git (/.cache/)
KEPT = 3  # cached runs kept, newest first


def _inputs(root: Path, blocks: Sequence[Block]) -> list[Path]:
    """Every file whose change may change what the examples print, sorted."""
    found = {path for pattern in INPUT_FILES for path in root.glob(pattern)}
    for directory in INPUT_DIRS:
        found.update(
            p for p in (root / directory).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    for block in blocks:  # included files, and repository files a command names
        words = [block.argument] if block.kind == "include" else shlex.split(block.argument)
        found.update(root / w for w in words if "/" in w and (root / w).is_file())
    return sorted(p for p in found if p.is_file())


def cache_key(root: Path = REPO) -> str:
    """A hash of every input of the examples (`_inputs`), the interpreter and the packages."""
    digest = hashlib.sha256(sys.version.encode())
    packages = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    digest.update("\n".join(packages).encode())
    for path in _inputs(root, collect(root)):
        digest.update(f"\0{path.relative_to(root)}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def _dump(produced: dict[Block, str]) -> str:
    return json.dumps([[b.doc, b.line, b.kind, b.argument, text] for b, text in produced.items()])


def _load(text: str, blocks: Sequence[Block]) -> dict[Block, str] | None:
    """The cached outputs, matched to `blocks` (None: they do not match, regenerate)."""
    wanted = [b for b in blocks if b.kind in ("example", "include")]
    rows = json.loads(text)
    if [(b.doc, b.line, b.kind, b.argument) for b in wanted] != [tuple(r[:4]) for r in rows]:
        return None
    return {b: row[4] for b, row in zip(wanted, rows, strict=True)}


def produced_once(root: Path = REPO, cache: Path = CACHE_DIR) -> dict[Block, str]:
    """`regenerate`, once per change of its inputs, whichever process asks first.

    The outputs are kept under `cache`, named by `cache_key`: a process that
    finds them reuses them; one that does not takes a file lock and
    regenerates them while every other one waits on the lock, then reads
    what it wrote. Only a whole run is kept (a crash keeps nothing), and the
    docs are part of the key, so a cached run compares as a fresh one would.
    """
    key, blocks = cache_key(root), collect(root)
    cache.mkdir(parents=True, exist_ok=True)
    stored = cache / f"{key}.json"
    with (cache / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stored.exists():
            found = _load(stored.read_text(encoding="utf-8"), blocks)
            if found is not None:
                return found
        produced = regenerate(root)
        partial = stored.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(_dump(produced), encoding="utf-8")
        partial.replace(stored)
    _prune(cache)
    return produced


def _prune(cache: Path) -> None:
    """Keep the `KEPT` newest runs (and their locks)."""
    runs = sorted(cache.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in runs[KEPT:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".lock").unlink(missing_ok=True)


def difference(block: Block, produced: str) -> str:
    """A unified diff from what the document shows to what the program printed."""
    lines = difflib.unified_diff(
        block.text.splitlines(keepends=True),
        produced.splitlines(keepends=True),
        fromfile=f"{block.doc}:{block.start + 1} (shown)",
        tofile=f"{block.argument} (printed)",
    )
    return "".join(lines)


def rewrite(root: Path, produced: dict[Block, str]) -> list[Block]:
    """Write every differing block back into its document; the blocks rewritten."""
    changed = [b for b, text in produced.items() if not same(b.text, text)]
    for doc in sorted({b.doc for b in changed}):
        path = root / doc
        lines = path.read_text(encoding="utf-8").split("\n")
        for block in sorted((b for b in changed if b.doc == doc), key=lambda b: -b.start):
            lines[block.start : block.end] = produced[block].rstrip("\n").split("\n")
        path.write_text("\n".join(lines), encoding="utf-8")
    return changed


def _differing(produced: dict[Block, str]) -> Iterator[tuple[Block, str]]:
    for block, text in produced.items():
        if not same(block.text, text):
            yield block, text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docs_examples", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the examples in place")
    args = parser.parse_args(argv)
    pages = [REPO / doc for doc in DOCS]
    if args.write:
        for page in docs_kinds.rewrite(pages):
            print(f"rewrote the kinds lists of {page.relative_to(REPO)}")
    produced = regenerate()
    if args.write:
        for block in rewrite(REPO, produced):
            print(f"rewrote {block}")
        return 0
    differing = list(_differing(produced))
    for block, text in differing:
        print(f"{block}: differs from what the program prints\n{difference(block, text)}")
    print(f"{len(produced) - len(differing)} of {len(produced)} examples match")
    lists = list(docs_kinds.stale(pages))
    for page in lists:
        print(f"{page.relative_to(REPO)}: a kinds list differs from the registry (make docs)")
    return 1 if differing or lists else 0


if __name__ == "__main__":
    sys.exit(main())
