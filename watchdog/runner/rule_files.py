"""`memory-watchdog test-checks FILE.toml`: offline tests of checks, like `promtool test rules`.

A rule file holds named cases: events (name, session, offset from the start of the case's
window, optional payload) and the expected status and value per check id at the case's `at`
(its format: `load_rule_file`). Each case is written into a throwaway joelclaw-shaped table and
evaluated with the user's own config (event roles, built-in overrides, custom checks), so a team
can pin its checks in its own CI (docs/checks.md#test-them-offline-memory-watchdog-test-checks).
"""

from __future__ import annotations

import json
import math
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from checks.base import Report, Status
from checks.source_ddl import create_table_sql
from watchdog.core.durations import parse_duration
from watchdog.core.errors import ConfigError
from watchdog.core.settings import Settings, load_settings
from watchdog.core.store import Store
from watchdog.core.text import printable
from watchdog.core.times import parse_time
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

DEFAULT_AT = datetime(2026, 1, 1, 4, 0, tzinfo=UTC)
_EVENT_KEYS = {"name", "session", "offset", "payload", "id", "source", "component"}
_ROW_COLUMNS = (
    "id",
    "timestamp",
    "sessionId",
    "source",
    "component",
    "action",
    "success",
    "metadata_json",
)


@dataclass(frozen=True)
class RuleEvent:
    name: str
    offset: timedelta
    session: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    source: str = "interactive"
    component: str = "agent"


@dataclass(frozen=True)
class Expectation:
    check: str
    status: Status | None
    value: float | None
    has_value: bool


@dataclass(frozen=True)
class Case:
    name: str
    at: datetime
    window: timedelta | None
    events: tuple[RuleEvent, ...]
    expectations: tuple[Expectation, ...]


@dataclass(frozen=True)
class Outcome:
    case: str
    check: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class RuleFile:
    path: Path
    config: Path | None
    cases: tuple[Case, ...]


def _offset(text: Any, key: str) -> timedelta:
    if not isinstance(text, str):
        raise ConfigError(key, f"{text!r} is not an offset (e.g. +2m, -1h, +0s)")
    sign = -1 if text.startswith("-") else 1
    try:
        return sign * parse_duration(text.lstrip("+-"))
    except ValueError:
        raise ConfigError(key, f"{text!r} is not an offset (e.g. +2m, -1h, +0s)") from None


def _time(text: Any, key: str) -> datetime:
    try:
        return parse_time(str(text))
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def _event(raw: Any, key: str) -> RuleEvent:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table like { name = ..., session = ..., offset = ... }")
    unknown = set(raw) - _EVENT_KEYS
    if unknown:
        raise ConfigError(
            f"{key}.{sorted(unknown)[0]}",
            f"unknown key (accepted: {', '.join(sorted(_EVENT_KEYS))})",
        )
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ConfigError(f"{key}.name", "is required (the event name)")
    payload = raw.get("payload", {})
    if not isinstance(payload, dict):
        raise ConfigError(f"{key}.payload", "must be a table of attributes")
    return RuleEvent(
        name=raw["name"],
        offset=_offset(raw.get("offset", "+0s"), f"{key}.offset"),
        session=raw.get("session"),
        payload=payload,
        id=raw.get("id"),
        source=raw.get("source", "interactive"),
        component=raw.get("component", "agent"),
    )


def _expectation(check: str, raw: Any, key: str) -> Expectation:
    if not isinstance(raw, dict) or not set(raw) <= {"status", "value"} or not raw:
        raise ConfigError(key, 'must be a table like { status = "breached", value = 1 }')
    status = None
    if "status" in raw:
        try:
            status = Status(raw["status"])
        except ValueError:
            accepted = ", ".join(s.value for s in Status)
            raise ConfigError(
                f"{key}.status", f"{raw['status']!r} is not a status (accepted: {accepted})"
            ) from None
    value = raw.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"{key}.value", f"{value!r} is not a number")
    return Expectation(check, status, None if value is None else float(value), "value" in raw)


def load_rule_file(path: str) -> RuleFile:
    """Parse and validate a rule file; ConfigError names the case and key.

    The format, each case's `at` and `window` optional:

        config = "watchdog.toml"          # optional, relative to this file
        [[case]]
        name = "a late recall is a cold start"
        at = "2026-11-28T04:00:00Z"       # optional; window = "4h" optional too
        events = [
          { name = "session.started", session = "s1", offset = "+10m" },
          { name = "memory.recall.started", session = "s1", offset = "+16m" },
        ]
        expect.recall_coverage = { status = "breached", value = 1 }
    """
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("", f"rule file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"invalid TOML: {exc}", origin=path) from None
    unknown = set(data) - {"config", "case"}
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown key (accepted: config, case)", origin=path)
    cases = data.get("case", [])
    if not isinstance(cases, list) or not cases:
        raise ConfigError("case", "needs at least one [[case]]", origin=path)
    parsed = []
    try:
        for i, raw in enumerate(cases):
            key = f"case[{i}]"
            name = raw.get("name") or key
            at = _time(raw["at"], f"{key}.at") if "at" in raw else DEFAULT_AT
            window = None
            if "window" in raw:
                try:
                    window = parse_duration(str(raw["window"]))
                except ValueError as exc:
                    raise ConfigError(f"{key}.window", str(exc)) from None
            events = tuple(
                _event(e, f"{key}.events[{j}]") for j, e in enumerate(raw.get("events", []))
            )
            expect = raw.get("expect", {})
            if not isinstance(expect, dict) or not expect:
                raise ConfigError(f"{key}.expect", "needs at least one expect.<check id> = { ... }")
            expectations = tuple(_expectation(c, v, f"{key}.expect.{c}") for c, v in expect.items())
            parsed.append(Case(str(name), at, window, events, expectations))
    except ConfigError as exc:
        raise ConfigError(exc.key, exc.problem, origin=path) from None
    config = (file.parent / data["config"]) if "config" in data else None
    return RuleFile(file, config, tuple(parsed))


def _write_case(store: Store, table: str, case: Case, start: datetime) -> None:
    rows = []
    for n, event in enumerate(case.events):
        payload = dict(event.payload)
        if event.session is not None:
            payload.setdefault("session_id", event.session)
        rows.append(
            [
                event.id or f"{case.name[:20]}-{n:05d}",
                start + event.offset,
                None,
                event.source,
                event.component,
                event.name,
                0 if event.name.endswith("failed") else 1,
                json.dumps(payload),
            ]
        )
    store.command(create_table_sql("joelclaw", table, ttl=False))
    store.insert(table, rows, _ROW_COLUMNS)


def _case_settings(settings: Settings, table: str) -> Settings:
    source = settings.source.model_copy(
        update={"preset": "joelclaw", "table": table, "columns": {}, "name": "test-checks"}
    )
    return settings.model_copy(update={"source": source})


def _judge(expect: Expectation, report: Report, case: Case) -> Outcome:
    result = report.checks[expect.check]  # settings_for_rules checked that it exists
    problems = []
    if expect.status is not None and result.status is not expect.status:
        problems.append(f"status: expected {expect.status.value}, got {result.status.value}")
    if expect.has_value:
        got = result.value
        if (
            got is None
            or expect.value is None
            or not math.isclose(got, expect.value, rel_tol=1e-9, abs_tol=1e-9)
        ):
            problems.append(f"value: expected {_number(expect.value)}, got {_number(got)}")
    shown = f"status {result.status.value} value {_number(result.value)}"
    if problems:
        return Outcome(case.name, expect.check, False, f"{'; '.join(problems)} ({result.summary})")
    return Outcome(case.name, expect.check, True, shown)


def _number(value: float | None) -> str:
    """A value as people write it: 1, not 1.0; 0.1; none."""
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def run_rule_file(store: Store, rules: RuleFile, settings: Settings) -> list[Outcome]:
    """Evaluate every case in a fresh table of the store; one outcome per expectation."""
    database = f"test_checks_{uuid.uuid4().hex[:10]}"
    store.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    outcomes: list[Outcome] = []
    try:
        for i, case in enumerate(rules.cases):
            table = f"{database}.case_{i}"
            case_settings = _case_settings(settings, table)
            window = window_at(case_settings, case.at, case.window)
            _write_case(store, table, case, window.start)
            report = run_once(store, case_settings, window)
            outcomes.extend(_judge(expect, report, case) for expect in case.expectations)
    finally:
        store.command(f"DROP DATABASE IF EXISTS {database}")
    return outcomes


def settings_for_rules(rules: RuleFile, config: str | None) -> Settings:
    """The config the cases run with: --config, else the file's `config`, else defaults.

    Every expectation must name a check of that config: an unknown id is a
    mistake in the rule file (ConfigError), not a failed expectation.
    """
    settings = load_settings(
        config or (str(rules.config) if rules.config else None), plugins=PLUGINS
    )
    known = settings.check_ids
    for i, case in enumerate(rules.cases):
        for expect in case.expectations:
            if expect.check not in known:
                raise ConfigError(
                    f"case[{i}].expect.{expect.check}",
                    f"unknown check id (accepted: {', '.join(known)})",
                    origin=str(rules.path),
                )
    return settings


def format_outcomes(path: str, outcomes: list[Outcome]) -> str:
    lines = [f"test-checks {path}"]
    for o in outcomes:
        mark = "PASS" if o.passed else "FAIL"
        lines.append(f"  {mark}  {printable(o.case)}: {o.check}: {printable(o.detail, 500)}")
    failed = sum(not o.passed for o in outcomes)
    lines.append(f"result: {len(outcomes) - failed} of {len(outcomes)} expectations met")
    return "\n".join(lines) + "\n"
