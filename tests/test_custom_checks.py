"""Custom checks: every kind from config, their edges, config errors and test-checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks.base import Status
from checks.builtin import configured_checks
from checks.evidence import Evidence, ListedEvent
from tests.builder import T0, H, M, S, Scenario, evaluate
from watchdog.core.errors import ConfigError
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.plugins import PLUGINS
from watchdog.runner.rule_files import load_rule_file, run_rule_file, settings_for_rules

AT = T0 + 4 * H
ROOT = Path(__file__).parents[1]
KR = ["kr.started", "kr.completed", "kr.failed"]


def custom(**fields: Any) -> dict[str, Any]:
    return {"checks": {"custom": [{"id": "mine", "target": 0, **fields}]}}


def test_coverage_from_session_start(store: Store) -> None:
    """coverage: one of `required` within grace of the session's first event; the edge counts."""
    sc = Scenario()
    sc.session("edge").starts(T0 + H).emits("kr.started", T0 + H + 2 * M)
    sc.session("late").starts(T0 + H).emits("kr.started", T0 + H + 2 * M + S)
    config = custom(kind="coverage", required=KR, grace="2m")
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value, result.sample_size) == (Status.BREACHED, 1, 2)
    assert result.evidence == Evidence(sessions=("late",))


def test_coverage_after_each_trigger(store: Store) -> None:
    """coverage with `trigger`: every trigger event needs a required event within grace."""
    sc = Scenario()
    sc.session("a").starts(T0 + H).emits("dispatch", T0 + H).emits("kr.completed", T0 + H + M)
    sc.session("b").starts(T0 + H).emits("dispatch", T0 + H).emits("dispatch", T0 + 2 * H)
    sc.session("b").emits("kr.completed", T0 + H + 30 * S)
    sc.session("quiet").starts(T0 + H)  # no trigger: no obligation
    config = custom(kind="coverage", required=KR, trigger=["dispatch"], grace="1m")
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.value, result.sample_size, result.evidence) == (1, 2, Evidence(sessions=("b",)))


def test_coverage_until_closes_each_obligation_at_the_first_until_event(store: Store) -> None:
    """coverage with `until`: the required event must come before the next `until` event."""
    sc = Scenario()
    sc.session("edge").emits("compaction.before", T0 + H).emits("kr.started", T0 + H + M)
    sc.session("edge").emits("reply", T0 + H + M)  # at the reply's millisecond: in time
    sc.session("late").emits("compaction.before", T0 + H).emits("reply", T0 + H + M)
    sc.session("late").emits("kr.started", T0 + H + M + S)  # after the reply: too late
    sc.session("slow").emits("compaction.before", T0 + H).emits("kr.started", T0 + H + 9 * M)
    config = custom(
        kind="coverage", required=KR, trigger=["compaction.before"], until=["reply"], grace="10m"
    )
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.value, result.sample_size, result.evidence) == (
        1,
        3,
        Evidence(sessions=("late",)),
    )


def test_coverage_can_count_trigger_events(store: Store) -> None:
    """count = "events": value, sample and evidence are the trigger events, not the sessions."""
    sc = Scenario()
    s = sc.session("s")
    s.emits("dispatch", T0 + H, id="d1").emits("dispatch", T0 + 2 * H, id="d2")
    s.emits("dispatch", T0 + 3 * H, id="d3").emits("kr.completed", T0 + 2 * H + S)
    config = custom(kind="coverage", required=KR, trigger=["dispatch"], grace="1m", count="events")
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.value, result.sample_size) == (2, 3)
    listed = (ListedEvent("d1", "dispatch", "s"), ListedEvent("d3", "dispatch", "s"))
    assert result.evidence == Evidence(events=("d1", "d3"), details=listed)
    assert result.summary == "2 of 3 events missed kr.started or kr.completed or kr.failed"


def test_coverage_deadline_at_window_end_waits(store: Store) -> None:
    """An obligation due exactly at `at` is judged by the next window."""
    sc = Scenario()
    sc.session("s").starts(AT - 2 * M)
    result = evaluate(store, sc, AT, custom(kind="coverage", required=KR, grace="2m")).checks[
        "mine"
    ]
    assert result.status is Status.NO_DATA


def test_coverage_with_its_own_session_filter(store: Store) -> None:
    """A coverage check's `session_filter` narrows its sessions only."""
    sc = Scenario()
    sc.session("cli").starts(T0 + H)
    sc.event("session.started", T0 + H, "worker", source="worker")
    config = custom(kind="coverage", required=KR, grace="2m", session_filter="source = 'worker'")
    report = evaluate(store, sc, AT, config)
    assert report.checks["mine"].evidence == Evidence(sessions=("worker",))
    assert report.checks["recall_coverage"].value == 2


def test_outcome_rate_counts_lost_after_grace(store: Store) -> None:
    """outcome_rate: (failed + lost) / (completed + failed + lost), duplicates counted once."""
    sc = Scenario()
    for i in range(8):
        sc.session(f"s{i}").emits("kr.started", T0 + H).emits("kr.completed", T0 + H + M)
    sc.session("f").emits("kr.started", T0 + H).emits("kr.failed", T0 + H + S)
    sc.session("l").emits("kr.started", T0 + H).emits("kr.completed", T0 + H + M + S)
    sc.duplicate(sc.events[0])
    config = custom(
        kind="outcome_rate",
        started=["kr.started"],
        completed=["kr.completed"],
        failed=["kr.failed"],
        grace="1m",
        target=0.05,
        min_samples=5,
    )
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert result.value == 2 / 11  # 9 completed (one late), 1 failed, 1 lost
    assert result.status is Status.BREACHED


def test_quantile_nearest_rank_on_payload_field(store: Store) -> None:
    """quantile: exact nearest rank of a payload field; events after `at` do not exist."""
    sc = Scenario()
    for i in range(1, 11):
        sc.event("tool.call", T0 + H + i * S, "s", meta={"tokens": i * 10})
    sc.event("tool.call", AT + S, "s", meta={"tokens": 10_000})
    config = custom(
        kind="quantile",
        events=["tool.call"],
        field="payload.tokens",
        q=0.9,
        target=100,
        min_samples=1,
    )
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 90, 10)


def test_streak_of_bad_events(store: Store) -> None:
    """streak: longest run of `bad` among `bad + good`, ordered by time."""
    sc = Scenario()
    for i, mark in enumerate("bgbbbg"):
        sc.event("gate.hold" if mark == "b" else "gate.allow", T0 + H + i * S, "s")
    config = custom(kind="streak", bad=["gate.hold"], good=["gate.allow"], target=2)
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value) == (Status.BREACHED, 3)


def test_share_of_a_payload_value(store: Store) -> None:
    """share: events whose payload field equals the value, among the events."""
    sc = Scenario()
    for i, verdict in enumerate(["deny", "deny", "allow", "allow"]):
        sc.event("write.gate", T0 + H + i * S, "s", meta={"verdict": verdict})
    config = custom(
        kind="share",
        events=["write.gate"],
        field="verdict",
        value="deny",
        target=0.5,
        min_samples=1,
    )
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value) == (Status.BREACHED, 0.5)


def test_freshness_of_named_events(store: Store) -> None:
    """freshness with `events`: seconds since the newest of those events."""
    sc = Scenario()
    sc.event("kr.completed", AT - 2 * H, "s")
    sc.event("heartbeat", AT - M, "s")
    config = custom(kind="freshness", events=["kr.completed"], target=3600)
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value) == (Status.BREACHED, 7200)


def test_custom_window_is_used(store: Store) -> None:
    """A per-check `window` judges its own window next to the default one."""
    sc = Scenario()
    sc.event("tool.call", AT - 20 * H, "s", meta={"tokens": 5})
    config = custom(
        kind="quantile",
        events=["tool.call"],
        field="payload.tokens",
        q=0.5,
        target=100,
        min_samples=1,
        window="24h",
    )
    config["window"] = {"lookback": "30h"}
    result = evaluate(store, sc, AT, config).checks["mine"]
    assert (result.status, result.value) == (Status.OK, 5)


def test_builtin_declared_as_custom_gives_identical_results(store: Store) -> None:
    """The built-ins are instances of the kinds: the same declaration gives the same result."""
    sc = Scenario()
    for i in range(25):
        sc.session(f"s{i}").starts(T0 + H).recalls(
            T0 + H + S, latency_ms=100.0 * i, fails=i % 7 == 0
        )
    config = {
        "checks": {
            "custom": [
                {
                    "id": "p95_again",
                    "kind": "quantile",
                    "events": ["memory.recall.completed"],
                    "q": 0.95,
                    "target": 3000,
                    "comparison": ">=",
                    "min_samples": 20,
                },
                {
                    "id": "rate_again",
                    "kind": "outcome_rate",
                    "started": ["memory.recall.started"],
                    "completed": ["memory.recall.completed"],
                    "failed": ["memory.recall.failed"],
                    "grace": "5m",
                    "target": 0.05,
                    "min_samples": 20,
                },
            ]
        }
    }
    report = evaluate(store, sc, AT, config)
    for builtin, again in (
        ("recall_latency_p95", "p95_again"),
        ("recall_failure_rate", "rate_again"),
    ):
        a, b = report.checks[builtin], report.checks[again]
        assert (a.status, a.value, a.sample_size, a.evidence) == (
            b.status,
            b.value,
            b.sample_size,
            b.evidence,
        )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            custom(kind="coverage", required=KR),
            "checks.custom[0].grace: is required for kind coverage",
        ),
        (
            custom(kind="gauge"),
            "checks.custom[0].kind: 'gauge' is not accepted (accepted: coverage",
        ),
        (custom(kind="quantile", events=["x"], q=1.5), "checks.custom[0].q:"),
        (custom(kind="share", events=["x"], field="v"), "checks.custom[0].value: is required"),
        (custom(kind="streak", bad=[], good=["g"]), "checks.custom[0].bad:"),
        (
            custom(kind="coverage", required=KR, grace="soon"),
            "checks.custom[0].grace: 'soon' is not a duration",
        ),
        (
            custom(kind="coverage", required=KR, grace="1m", comparison="!="),
            "checks.custom[0].comparison:",
        ),
        (
            custom(kind="freshness", colour="red"),
            "checks.custom[0].colour: unknown key for kind freshness",
        ),
        (
            {"checks": {"custom": [{"id": "Bad Id", "kind": "freshness", "target": 1}]}},
            "checks.custom[0].id:",
        ),
        (
            custom(kind="coverage", required=KR, grace="1m", until=["reply"]),
            "checks.custom[0]: until needs trigger",
        ),
        (
            custom(kind="coverage", required=KR, grace="1m", trigger=["t"], count="messages"),
            "checks.custom[0].count: 'messages' is not accepted (accepted: 'sessions' or 'events')",
        ),
    ],
)
def test_malformed_custom_checks_name_index_and_key(config: dict[str, Any], message: str) -> None:
    """Each malformed custom check is a config error naming the table index and the key."""
    with pytest.raises(ConfigError) as err:
        configured_checks(settings_from_mapping(config, plugins=PLUGINS, env={}))
    assert message in str(err.value)


def test_custom_ids_are_unique_and_not_builtin() -> None:
    """A custom id may not repeat or shadow a built-in."""
    twice = {"checks": {"custom": [{"id": "a", "kind": "freshness", "target": 1}] * 2}}
    with pytest.raises(ConfigError, match=r"checks.custom\[1\].id: 'a' is already used above"):
        configured_checks(settings_from_mapping(twice, plugins=PLUGINS, env={}))
    shadow = {"checks": {"custom": [{"id": "recall_coverage", "kind": "freshness", "target": 1}]}}
    with pytest.raises(ConfigError, match="is a built-in check id"):
        configured_checks(settings_from_mapping(shadow, plugins=PLUGINS, env={}))


def test_custom_window_must_fit_in_lookback() -> None:
    """A window (plus grace) longer than the lookback cannot be judged: config error."""
    config = custom(kind="freshness", window="48h")
    with pytest.raises(ConfigError, match=r"checks.custom\[0\].window"):
        configured_checks(settings_from_mapping(config, plugins=PLUGINS, env={}))


def test_project_rule_file_passes(store: Store) -> None:
    """The built-in checks' own rule file (tests/rules/builtin_checks.toml) passes."""
    rules = load_rule_file(str(ROOT / "tests/rules/builtin_checks.toml"))
    outcomes = run_rule_file(store, rules, settings_for_rules(rules, None))
    assert outcomes and all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def test_example_rule_file_passes(store: Store) -> None:
    """The example custom checks pass their rule file."""
    rules = load_rule_file(str(ROOT / "config/examples/knowledge.rules.toml"))
    outcomes = run_rule_file(store, rules, settings_for_rules(rules, None))
    assert len(outcomes) == 4 and all(o.passed for o in outcomes)


@pytest.mark.slow
def test_test_checks_cli_fails_with_readable_lines(tmp_path: Path) -> None:
    """test-checks exits 1 on a failed expectation and says what differed."""
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[case]]\nname = "wrong on purpose"\n'
        'events = [{ name = "session.started", session = "s1", offset = "+10m" }]\n'
        'expect.recall_coverage = { status = "ok", value = 0 }\n'
    )
    bin_ = Path(sys.executable).parent / "memory-watchdog"
    result = subprocess.run(
        [str(bin_), "test-checks", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert (
        "FAIL  wrong on purpose: recall_coverage: status: expected ok, got breached;"
        " value: expected 0, got 1" in result.stdout
    )
    assert "result: 0 of 1 expectations met" in result.stdout


@pytest.mark.slow
def test_test_checks_cli_rejects_bad_rule_file(tmp_path: Path) -> None:
    """A malformed rule file is exit 2 naming the case and key."""
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[case]]\nevents = [{ name = "x", offset = "soon" }]\nexpect.recall_coverage = { status = "ok" }\n'
    )
    bin_ = Path(sys.executable).parent / "memory-watchdog"
    result = subprocess.run(
        [str(bin_), "test-checks", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "case[0].events[0].offset: 'soon' is not an offset" in result.stderr


def _test_checks(*args: str) -> subprocess.CompletedProcess[str]:
    bin_ = Path(sys.executable).parent / "memory-watchdog"
    return subprocess.run(
        [str(bin_), "test-checks", *args], capture_output=True, text=True, check=False
    )


_PASSING = (
    '[[case]]\nname = "a cold start"\n'
    'events = [{ name = "session.started", session = "s1", offset = "+10m" }]\n'
    'expect.recall_coverage = { status = "breached", value = 1 }\n'
)


@pytest.mark.slow
def test_test_checks_takes_several_files_like_promtool(tmp_path: Path) -> None:
    """Every file given is run; the exit code is 1 when any expectation in any file fails."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(_PASSING)
    bad.write_text(_PASSING.replace("value = 1", "value = 2"))
    both = _test_checks(str(good), str(bad))
    assert both.returncode == 1
    assert f"test-checks {good}" in both.stdout and f"test-checks {bad}" in both.stdout
    assert "value: expected 2, got 1" in both.stdout
    assert _test_checks(str(good), str(good)).returncode == 0


@pytest.mark.slow
def test_test_checks_unknown_check_id_is_a_usage_error(tmp_path: Path) -> None:
    """An expectation for a check the config does not have is exit 2 naming it, not a FAIL."""
    rules = tmp_path / "rules.toml"
    rules.write_text(_PASSING.replace("expect.recall_coverage", "expect.recall_coverge"))
    result = _test_checks(str(rules))
    assert result.returncode == 2, result.stdout
    assert "case[0].expect.recall_coverge: unknown check id (accepted: recall_coverage" in (
        result.stderr
    )
