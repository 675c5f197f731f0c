"""A backtest judges every window as `check --at <its end>` does, in one pass.

The property: over generated worlds (sessions spread over two days, with
conversations, compactions, losses, failures, gate decisions, deviations,
rows written again at another time),
random periods, window lengths, grid steps, lookbacks and idle timeouts,
and every check of the kind suite (every built-in check, a custom check of
every declarable kind, `volume` defined in tests/test_kinds.py, and custom
checks with windows longer than the run's, so that their windows overlap),
each window's report from the one pass is the report `run_once` gives for
that window alone: the same verdicts, values, sample sizes, evidence, data
quality and deviation aggregation, and with triage the same breakdowns.

An example costs its evaluations (one pass, and one run per window), whatever its rows: so
a world holds 3 to 10 sessions, and 4 examples of up to 3 windows are run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests import test_engine_properties as engine
from tests.builder import T0, M, S, Scenario, unique_table
from tests.test_kinds import CONFIG as EVERY_CHECK
from tests.test_kinds import SUITE
from tests.test_session_state import EXAMPLES
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.backtest import run_windows, windows_ending
from watchdog.runner.once import run_once, window_at

# A human message and what follows it: a recall then the answer, the answer only, a
# greeting (trivial), or no answer at all (the grace is the deadline).
TURNS = ("recalled", "unrecalled", "trivial", "unanswered")

# Rows written again, the same event id at another time (a retry that stamped anew): a
# duplicate that may straddle the bounds a pass splits a session at.
retries = st.lists(st.tuples(st.integers(0, 10_000), st.integers(-300, 300)), max_size=4)
world_sessions = st.lists(
    st.fixed_dictionaries(
        {
            "plan": engine.session_plan,
            "shift_min": st.integers(-24 * 60, 24 * 60),
            "turns": st.lists(st.tuples(st.integers(0, 90), st.sampled_from(TURNS)), max_size=3),
        }
    ),
    min_size=3,
    max_size=10,
)
periods = st.fixed_dictionaries(
    {
        "step_min": st.sampled_from([30, 60, 120, 240]),
        "length_min": st.sampled_from([30, 60, 120, 240]),
        # One window (its own scans) or several (the pass's pieces): three is first, middle
        # and last, each overlapping or apart from its neighbours as the step and length say.
        "windows": st.integers(1, 3),
        "first_end_step": st.integers(-8, 40),
        "idle_min": st.sampled_from([60, 180, 360]),
        "extra_lookback_min": st.integers(0, 600),
        "triage": st.booleans(),
    }
)


def world(sessions: list[dict[str, Any]], retried: Sequence[tuple[int, int]] = ()) -> Scenario:
    """The sessions, each moved by its shift, with its conversation turns, and retried rows."""
    sc = Scenario()
    for i, s in enumerate(sessions):
        sid = f"s{i:02d}"
        shift = timedelta(minutes=s["shift_min"])
        engine.add_session(sc, sid, s["plan"], shift)
        start = T0 + s["plan"]["start_min"] * M + shift
        talk = sc.session(sid)
        for offset_min, turn in s["turns"]:
            at = start + offset_min * M + 7 * S
            talk.asks(at, kind="greeting" if turn == "trivial" else None)
            if turn == "recalled":
                talk.emits("memory.recall.started", at + 10 * S)
            if turn != "unanswered":
                talk.answers(at + 20 * S)
    for index, shift_min in retried if sc.events else ():
        copy = sc.duplicate(sc.events[index % len(sc.events)])
        copy.ts += timedelta(minutes=shift_min)
    return sc


def config(period: dict[str, Any]) -> dict[str, Any]:
    """Every check of the kind suite, the period's window and lookback, and custom checks
    whose windows (twice and three times the run's) overlap from one window to the next."""
    length, idle = period["length_min"], period["idle_min"]
    lookback = length + idle + period["extra_lookback_min"]
    longer = [
        {
            "id": "p95_long",
            "kind": "quantile",
            "events": ["memory.recall.completed"],
            "q": 0.95,
            "target": 3000,
            "min_samples": 2,
            "window": f"{2 * length}m",
        },
        {
            "id": "answered_long",
            "kind": "coverage",
            "trigger": ["message.received"],
            "required": ["memory.recall.started"],
            "until": ["message.sent"],
            "grace": "2m",
            "count": "events",
            "target": 0,
            "window": f"{3 * length}m",
        },
    ]
    fitting = [c for c in longer if int(c["window"][:-1]) + 2 <= lookback]
    checks = {**EVERY_CHECK["checks"], "custom": [*EVERY_CHECK["checks"]["custom"], *fitting]}
    window = {"lookback": f"{lookback}m", "idle_timeout": f"{idle}m"}
    # The window is one schedule period long (docs/spec.md section 4).
    return {"checks": checks, "window": window, "schedule": {"every": f"{length}m"}}


@pytest.mark.slow
@hypothesis_settings(EXAMPLES, max_examples=4)
@given(sessions=world_sessions, retried=retries, period=periods)
def test_a_backtest_judges_each_window_as_check_at_its_end(
    store: Store,
    sessions: list[dict[str, Any]],
    retried: list[tuple[int, int]],
    period: dict[str, Any],
) -> None:
    """Every window of the pass has the report of `check --at <its end>`, triage included."""
    table = unique_table()
    world(sessions, retried).write(store, table)
    settings = settings_from_mapping(
        {**config(period), "source": {"table": table}}, plugins=SUITE, env={}
    )
    step = timedelta(minutes=period["step_min"])
    first = T0 + period["first_end_step"] * step
    ends = [first + i * step for i in range(period["windows"])]
    triage = period["triage"]
    passed = run_windows(store, settings, windows_ending(settings, ends), triage=triage)
    assert [r.window.at for r in passed] == ends
    for end, report in zip(ends, passed, strict=True):
        alone = run_once(store, settings, window_at(settings, end), triage=triage)
        assert report.to_json() == alone.to_json(), end


@pytest.mark.slow
def test_each_window_of_the_pass_reads_back_only_as_far_as_its_own_lookback(store: Store) -> None:
    """A session begun before the second window's lookback but within the first's: in the
    second window it is judged as `check` there reads it (its start unseen), not from the
    first window's wider read; a pass that read every window from the first's lookback start
    gives the second window another report."""
    sc = Scenario()
    # Started (unrecalled) inside W1's lookback only; active again and ended within W2.
    sc.session("begun-early").starts(T0 + 150 * M).asks(T0 + 280 * M).answers(T0 + 282 * M).ends(
        T0 + 300 * M
    )
    sc.session("within").starts(T0 + 290 * M).asks(T0 + 291 * M).answers(T0 + 292 * M).ends(
        T0 + 310 * M
    )
    table = unique_table()
    sc.write(store, table)
    config = {
        "window": {"lookback": "300m", "idle_timeout": "60m"},
        "schedule": {"every": "240m"},
        "source": {"table": table},
    }
    settings = settings_from_mapping(config, plugins=SUITE, env={})
    ends = [T0 + 240 * M, T0 + 480 * M]  # lookback starts T0 - 60m and T0 + 180m
    passed = run_windows(store, settings, windows_ending(settings, ends))
    for end, report in zip(ends, passed, strict=True):
        alone = run_once(store, settings, window_at(settings, end))
        assert report.to_json() == alone.to_json(), end
