"""`memory-watchdog config check`: is this config one the daemon can run? (as `amtool check-config`)

It loads the file (every key validated), checks the environment (every secret a receiver
references is set, custom templates render) and, unless `--no-store`, reaches the store and
probes the source there (`checks.probe`), writing nothing, not even the watchdog's own tables.
What is fine goes to stdout, each problem to stderr as one line; the exit code is 0, 2 (a
config or environment problem, whatever else is wrong) or 3 (the store, the table or its
columns) (docs/operations.md#before-you-deploy-memory-watchdog-config-check).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

from alerts.notifiers import build_notifiers
from alerts.render import templates
from alerts.routing import Router
from alerts.state import schema_exists
from checks.builtin import configured_checks
from checks.probe import probe_source
from checks.slo.specs import never_firing, slo_specs
from watchdog.cli.args import (
    Subparsers,
    common_arguments,
    judged,
    load,
    shared_package_warning,
)
from watchdog.cli.epilog import STORE, helped
from watchdog.core.durations import format_duration
from watchdog.core.errors import ConfigError, StoreError, UsageError
from watchdog.core.logs import said
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.settings.load import config_file
from watchdog.core.store import open_configured
from watchdog.core.text import printable


@dataclass
class Verdict:
    """What the check found: lines for stdout, problems for stderr, and the exit code."""

    lines: list[str] = field(default_factory=list)
    problems: list[tuple[str, int]] = field(default_factory=list)  # (line, exit code)

    def say(self, line: str) -> None:
        self.lines.append(line)

    def fail(self, key: str, problem: str, code: int) -> None:
        self.problems.append((f"{key}: {problem}" if key else problem, code))

    @property
    def code(self) -> int:
        codes = {code for _, code in self.problems}
        return 2 if 2 in codes else 3 if codes else 0


CHECK_EXAMPLES = (
    ("config check --config watchdog.toml", "the file, its environment, its source on the store"),
    ("config check --config watchdog.toml --no-store", "the file and environment only (CI)"),
)
CONFIG_EXITS = (
    (0, "the config loads and its source can be read"),
    (2, "a problem of the file or its environment (each on a line)"),
    STORE,
)


def add_config(sub: Subparsers) -> None:
    """Register `memory-watchdog config check` (the CLI's COMMANDS registry calls this)."""
    p = sub.add_parser(
        "config",
        help="check a config file, its environment and its source",
        **helped(CHECK_EXAMPLES, CONFIG_EXITS),
    )
    actions = p.add_subparsers(dest="config_action", metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="validate the file and environment, and probe the source on the store"
        " (exit 0, 2 config, 3 store)",
        **helped(CHECK_EXAMPLES, CONFIG_EXITS),
    )
    common_arguments(check)
    check.add_argument(
        "--no-store",
        action="store_true",
        help="check the file and environment only (e.g. in CI, where no store is reachable)",
    )
    check.set_defaults(run=cmd_config_check)
    p.set_defaults(run=_config_usage)


def _config_usage(args: argparse.Namespace) -> int:
    raise UsageError("config: an action is required (check; see memory-watchdog config --help)")


def cmd_config_check(args: argparse.Namespace) -> int:
    where = config_file(args.config)
    warning = shared_package_warning()
    if warning:  # not a problem of the config: said, and the exit code is the config's
        said(warning, level=logging.WARNING)
    try:
        settings = load(args)
    except ConfigError as exc:  # every problem of the file itself, one line each, exit 2
        for problem in exc.problems:
            said(str(problem))
        print(f"config check: FAILED ({len(exc.problems)} problem(s))")
        return 2
    for line in never_firing(slo_specs(settings, configured_checks(settings))):
        said(f"warning: {printable(line, None)}", level=logging.WARNING)
    if not args.no_store:
        settings = judged(settings)
    verdict = Verdict()
    verdict.say(f"config {where or '(none: the built-in defaults)'}: loaded")
    describe_settings(settings, verdict)
    check_environment(settings, verdict)
    if args.no_store:
        verdict.say("store: not checked (--no-store)")
    else:
        check_store(settings, verdict)
    # Escaped as every human-facing output is: a name in the config may hold ESC or CR.
    for line in verdict.lines:
        print(printable(line, None))
    for line, _ in verdict.problems:
        said(printable(line, None))
    count = len(verdict.problems)
    print("config check: OK" if not count else f"config check: FAILED ({count} problem(s))")
    return verdict.code


def describe_settings(settings: Settings, verdict: Verdict) -> None:
    """What the config sets up, in the words the other commands use."""
    source = settings.source
    custom = len(settings.custom_checks)
    verdict.say(
        f"  source {source.display_name}: preset {source.preset}, table {source.table_name}"
    )
    verdict.say(f"  checks: {len(settings.check_ids)} ({custom} custom)")
    slos = ", ".join(settings.slo.enabled) or "none"
    verdict.say(f"  slos: {slos} (buckets of {format_duration(settings.slo.bucket)})")
    verdict.say(f"  schedule: {Schedule.from_settings(settings.schedule).describe()}")
    receivers = build_notifiers(settings)
    described = "; ".join(r.describe() for r in receivers.values()) or "none (nothing is sent)"
    verdict.say(f"  receivers: {described}")
    if settings.alerts.routes:
        routes = Router.of(settings.alerts).describe(list(receivers))
        verdict.say(f"  routes: {'; '.join(routes)}")


def check_environment(settings: Settings, verdict: Verdict) -> None:
    """The secrets the receivers reference, and the templates they render."""
    missing = settings.alerts.missing_secrets()
    for secret in missing:
        verdict.fail(secret.key, f"environment variable {secret.variable} is not set", 2)
    if not missing:
        verdict.say("environment: every secret the receivers reference is set")
    directory = settings.alerts.templates_dir
    try:
        templates(directory)
    except ConfigError as exc:
        verdict.fail(exc.key, exc.problem, 2)
    else:
        verdict.say(f"templates: {directory + ' (every one renders)' if directory else 'built-in'}")


def check_store(settings: Settings, verdict: Verdict) -> None:
    """Reach the store and probe the source there; read-only."""
    try:
        with open_configured(settings.store) as store:
            state = (
                "exist"
                if schema_exists(store, settings)
                else "do not exist yet (the first `check --notify` or daemon run creates them)"
            )
            verdict.say(
                f"store {store.url.masked}: reachable; the watchdog's tables in database"
                f" {settings.store.database} {state}"
            )
            probe = probe_source(store, settings)
    except StoreError as exc:
        verdict.fail("", str(exc), 3)
        return
    if probe.columns:
        verdict.say(f"  source table {probe.table}: {probe.columns} columns")
    compiled = [f.label or f.key for f in probe.findings if f.ok]
    if compiled:
        verdict.say(f"  compiles (LIMIT 0): {', '.join(compiled)}")
    for finding in probe.problems:
        verdict.fail(finding.key, finding.problem, 2 if finding.config else 3)
