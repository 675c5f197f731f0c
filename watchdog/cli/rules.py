"""`memory-watchdog test-checks FILE.toml`: offline tests of checks, like `promtool test rules`."""

from __future__ import annotations

import argparse
import sys
import tempfile

from watchdog.cli.args import Subparsers, common_arguments
from watchdog.core.store import open_store
from watchdog.runner.rule_files import (
    format_outcomes,
    load_rule_file,
    run_rule_file,
    settings_for_rules,
)


def add_test_checks(sub: Subparsers) -> None:
    p = sub.add_parser(
        "test-checks", help="run offline rule tests of the checks (exit 1 on a failure)"
    )
    p.add_argument("file", help="rule file (TOML) with [[case]] tables")
    common_arguments(p)
    p.set_defaults(run=cmd_test_checks)


def cmd_test_checks(args: argparse.Namespace) -> int:
    rules = load_rule_file(args.file)
    settings = settings_for_rules(rules, args.config)
    with tempfile.TemporaryDirectory(prefix="memory-watchdog-rules-") as scratch:
        url = args.store or f"chdb://{scratch}/store"
        with open_store(url, create=True) as store:
            outcomes = run_rule_file(store, rules, settings)
    sys.stdout.write(format_outcomes(args.file, outcomes))
    return 0 if all(o.passed for o in outcomes) else 1
