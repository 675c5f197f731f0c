"""Every `--help` ends with examples and the exit codes, and every example is a command line that
parses (docs/spec.md#7-command-line)."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.cli.main import attach_dash_values, build_parser

REPO = Path(__file__).parents[1]
BIN = Path(sys.executable).parent / "memory-watchdog"
EXIT_LINE = re.compile(r"^  (\d+)  \S")


def parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and each of its subcommands' (`silence add` too), with their words."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*path, name))


EVERY = list(parsers(build_parser()))
IDS = [" ".join(path) or "memory-watchdog" for path, _ in EVERY]


def sections(help_text: str) -> tuple[list[str], list[str]]:
    """The example command lines and the exit code lines at the end of a help text."""
    _, examples_mark, rest = help_text.partition("\nExamples:\n")
    examples, exits_mark, exits = rest.partition("\n\nExit codes:\n")
    assert examples_mark and exits_mark, help_text[-400:]
    commands = [line.strip() for line in examples.splitlines() if not line.strip().startswith("#")]
    return commands, exits.rstrip("\n").splitlines()


def exit_codes(help_text: str) -> list[int]:
    _, lines = sections(help_text)
    return [int(m.group(1)) for line in lines if (m := EXIT_LINE.match(line))]


@pytest.mark.parametrize(("path", "parser"), EVERY, ids=IDS)
def test_every_help_ends_with_examples_then_exit_codes(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    """Each command's help (the program's, a group's, an action's) ends with both sections, the
    exit codes last, each code once, 2 (usage) among them."""
    commands, lines = sections(parser.format_help())
    assert commands and all(c.startswith("memory-watchdog ") for c in commands), commands
    codes = exit_codes(parser.format_help())
    assert lines and EXIT_LINE.match(lines[0]), lines
    assert codes == sorted(set(codes)) and 2 in codes and set(codes) <= {0, 1, 2, 3}, codes


@pytest.mark.parametrize(("path", "parser"), EVERY, ids=IDS)
def test_every_example_is_a_command_line_that_parses(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    """Each example parses with the real parser into a command that runs, and a command's
    examples are of that command."""
    commands, _ = sections(parser.format_help())
    for command in commands:
        argv = shlex.split(command)[1:]
        assert argv[: len(path)] == list(path), command
        full = build_parser()
        args = full.parse_args(attach_dash_values(full, argv))
        assert callable(getattr(args, "run", None)), command


def test_check_says_the_exit_codes_of_the_spec() -> None:
    """`check --help` lists 0, 1, 2 and 3, the codes docs/spec.md section 7 gives `check`."""
    spec = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")
    said = re.search(r"Exit codes of `check`: (.*?)\.", spec, re.S)
    assert said is not None
    in_spec = [
        int(code)
        for code in re.findall(r"\b(\d) (?:no breach|at least|usage|the store)", said.group(1))
    ]
    check = dict(EVERY)[("check",)]
    assert exit_codes(check.format_help()) == in_spec == [0, 1, 2, 3]


@pytest.mark.slow
def test_the_real_program_prints_the_examples_and_exit_codes() -> None:
    """`memory-watchdog daemon --help`, as a process: exit 0, the sections at the end."""
    done = subprocess.run(
        [str(BIN), "daemon", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    commands, _ = sections(done.stdout)
    assert "memory-watchdog daemon --http 127.0.0.1:8787 --log-format json" in commands
    assert exit_codes(done.stdout) == [0, 1, 2, 3]
