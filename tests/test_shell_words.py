"""A printed command reaches bash with its data values byte for byte (issue 45 point 7: the
explain command of a session id holding control or bidi characters showed them as `\\x1b`
inside single quotes, so pasted it asked for another session).

Each printed line runs through `bash -c` with a stand-in `memory-watchdog` first on PATH that
writes the arguments it got, NUL-separated, to a file: what bash handed it is compared with
the value, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from watchdog.core.settings import command_flags, load_settings
from watchdog.core.text import printable, shell_word
from watchdog.report.explain import explain_command
from watchdog.runner.plugins import PLUGINS

AT = datetime(2026, 11, 28, 4, tzinfo=UTC)
HOSTILE = {
    "escape sequences": "\x1b[2J\x1b[31mowned",
    "a carriage return": "shown\rhidden",
    "a newline": "line one\nline two",
    "a bidi override": "session-\u202eevil",
    "a quote": "it's",
    "dollars and backticks": "$HOME `id` $(id) ${x}",
    "backslashes": "a\\b\\x41\\",
    "DEL and C1 controls": "a\x7fb\x85c\x9bd",
    "a tab": "a\tb",
    "non-ASCII text": "é 日本 🙂",
    "a byte that is no UTF-8": "a\udcffb",
    "globs and history": "*?[a] !! ~",
    "the empty id": "",
}

STAND_IN = '#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$ARGS_OUT"\n'


def pasted(line: str, tmp_path: Path) -> list[bytes]:
    """The arguments `memory-watchdog` gets when `line` is pasted into bash."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "memory-watchdog"
    stand_in.write_text(STAND_IN, encoding="utf-8")
    stand_in.chmod(0o755)
    out = tmp_path / "args"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["ARGS_OUT"] = str(out)
    env["LC_ALL"] = "C"  # the escapes do not depend on the locale
    done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return out.read_bytes().split(b"\0")[:-1]


def raw(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("session_id", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_printed_explain_command_gives_bash_the_id_byte_for_byte(
    session_id: str, tmp_path: Path
) -> None:
    """Pasted, the explain command hands `memory-watchdog` exactly the session id."""
    line = explain_command(session_id, AT)
    args = pasted(line, tmp_path)
    assert args == [b"explain", raw(session_id), b"--at", b"2026-11-28T04:00:00Z"]


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_shell_word_is_one_printable_line(value: str) -> None:
    """A terminal shows the word as it is: no control or bidi character, no line break."""
    word = shell_word(value)
    assert printable(word, None) == word and "\n" not in word


def test_a_config_path_with_controls_in_the_printed_flags_reaches_bash(tmp_path: Path) -> None:
    """`--config` and `--store` of the printed commands arrive as they are, a newline and an
    ESC in the directory's name included."""
    where = tmp_path / "on\ncall \x1b[31m it's"
    where.mkdir()
    config = where / "watchdog.toml"
    config.write_text("", encoding="utf-8")
    store = f"chdb://{where}/store"
    settings = load_settings(str(config), plugins=PLUGINS, env={"WATCHDOG_STORE_URL": store})
    flags = command_flags(settings)
    assert printable(flags, None) == flags  # one line a terminal shows as it is
    args = pasted(f"memory-watchdog check {flags}", tmp_path)
    assert args == [b"check", b"--config", raw(str(config)), b"--store", raw(store)]


def test_an_id_too_long_to_print_is_not_cut_into_another() -> None:
    """A 1 MB id is not printed (nor cut, which would name another session): the line says
    where to take it from, and stays short; a 1,000-character id is printed whole."""
    line = explain_command("x" * 1_000_000, AT)
    assert "an id of 1000000 characters: take it from --format json" in line
    assert len(line) < 200 and "xxx" not in line
    assert "x" * 1000 in explain_command("x" * 1000, AT)
