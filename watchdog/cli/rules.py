"""`memory-watchdog test-checks FILE.toml`: offline tests of checks, like `promtool test rules`.

The rule file's cases are run by watchdog.runner.rule_files
(docs/checks.md#test-them-offline-memory-watchdog-test-checks).
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from watchdog.cli.args import Subparsers, common_arguments
from watchdog.cli.epilog import STORE, USAGE, helped
from watchdog.core.store import open_store
from watchdog.runner.rule_files import (
    format_outcomes,
    load_rule_file,
    run_rule_file,
    settings_for_rules,
)


def add_test_checks(sub: Subparsers) -> None:
    p = sub.add_parser(
        "test-checks",
        help="run offline rule tests of the checks (exit 1 on a failure)",
        **helped(
            (
                ("test-checks tests/rules/builtin_checks.toml", "run the built-in checks' cases"),
                ("test-checks --config watchdog.toml rules/*.toml", "your checks, your cases"),
            ),
            ((0, "every case passed"), (1, "a case failed"), USAGE, STORE),
        ),
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="rule files (TOML) with [[case]] tables"
    )
    common_arguments(p)
    p.set_defaults(run=cmd_test_checks)


def cmd_test_checks(args: argparse.Namespace) -> int:
    """Every file is checked before any runs (exit 2 on a mistake); exit 1 if any expectation fails."""
    loaded = []
    for path in args.files:
        rules = load_rule_file(path)
        loaded.append((path, rules, settings_for_rules(rules, args.config)))
    passed = True
    with tempfile.TemporaryDirectory(prefix="memory-watchdog-rules-") as scratch:
        url = args.store or f"chdb://{scratch}/store"
        with open_store(url, create=True) as store:
            for path, rules, settings in loaded:
                outcomes = run_rule_file(store, rules, settings)
                sys.stdout.write(format_outcomes(path, outcomes))
                passed = passed and all(o.passed for o in outcomes)
    return 0 if passed else 1
