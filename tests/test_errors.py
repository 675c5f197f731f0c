"""Errors are what they are: a store problem is a store error, a bug is a bug."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from watchdog.cli.args import Subparsers
from watchdog.cli.main import main
from watchdog.core.errors import StoreError
from watchdog.core.store import Store
from watchdog.core.urls import parse_store_url


class _BuggyClient:
    """A client whose call fails the way a bug of ours would (not a driver error)."""

    def query(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    command = insert = query

    def close(self) -> None:
        pass


def test_a_bug_in_a_query_is_not_a_store_error() -> None:
    """A TypeError while querying leaves the store adapter as a TypeError, never an outage."""
    store = Store(_BuggyClient(), parse_store_url("chdb://memory"))
    with pytest.raises(TypeError):
        store.query("SELECT 1")
    with pytest.raises(TypeError):
        store.insert("t", [[1]], ["x"])


def test_a_driver_error_is_a_store_error_named_by_its_code(store: Store) -> None:
    """The server's error name decides the wording: UNKNOWN_DATABASE reads 'database not found'."""
    with pytest.raises(StoreError) as raised:
        store.query("SELECT * FROM no_such_database.t")
    assert raised.value.problem.startswith("database not found: Database no_such_database")


def _buggy_command(sub: Subparsers) -> None:
    def run(args: argparse.Namespace) -> int:
        return {}["missing"]  # type: ignore[no-any-return]

    sub.add_parser("buggy").set_defaults(run=run)


def test_an_internal_error_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A bug exits 1 with one line saying it is one, and how to get the traceback."""
    code = main(["buggy"], commands={"buggy": "tests.test_errors:_buggy_command"})
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "memory-watchdog: internal error (KeyError), a bug in memory-watchdog;"
        " run again with --debug for the traceback"
    ]


def test_debug_shows_the_traceback_of_an_internal_error(capsys: pytest.CaptureFixture[str]) -> None:
    """With --debug the traceback comes first; the exit code stays 1."""
    code = main(["buggy", "--debug"], commands={"buggy": "tests.test_errors:_buggy_command_debug"})
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "KeyError: 'missing'" in err


def _buggy_command_debug(sub: Subparsers) -> None:
    _buggy_command(sub)
    sub.choices["buggy"].add_argument("--debug", action="store_true")
