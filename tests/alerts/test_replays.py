"""A replay never moves the live watermark: future `--at`, past replays, poisoned stores."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from alerts.pipeline import process
from alerts.records import alert_states
from alerts.state import REPLAY, ensure_schema, record_run
from checks.base import Status, Window
from tests.alerts.conftest import T0, H, report
from watchdog.cli.check import kind_of_run
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.daemon.status import last_completed_at
from watchdog.daemon.web import health

BIN = Path(sys.executable).parent / "memory-watchdog"


@pytest.mark.slow
def test_notify_at_a_future_time_is_refused(tmp_path: Path) -> None:
    """`check --notify --at 2099-...` is exit 2 and records nothing: it would silence every live run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = str(tmp_path)
    result = subprocess.run(
        [str(BIN), "check", "--notify", "--at", "2099-01-01T00:00:00Z", "--store", "chdb://memory"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "memory-watchdog: --at: 2099-01-01T00:00:00Z is in the future: --notify judges only"
        " what has happened (a replay of the past is fine; a check without --notify may look"
        " ahead)"
    ]


def test_a_replay_does_not_move_what_live_runs_resume_from(
    store: Store, settings: Settings
) -> None:
    """A live run at 04:00 and a replay at 10:00: live runs and status still see 04:00."""
    now = T0 + 12 * H
    process(store, settings, report(T0, {"recall_coverage": Status.OK}), now=now)
    process(
        store, settings, report(T0 + 6 * H, {"recall_coverage": Status.OK}), now=now, kind=REPLAY
    )
    assert last_completed_at(store, settings, now) == T0


def test_a_run_recorded_in_the_future_is_never_the_last_completed(
    store: Store, settings: Settings
) -> None:
    """A store poisoned by an older version (a live run at 2099) still shows the real last run."""
    ensure_schema(store, settings)
    now = T0 + 12 * H
    for at in (T0, T0 + 100_000 * H):
        record_run(
            store,
            settings,
            source=settings.source.display_name,
            window=Window(at=at, length=4 * H, lookback=24 * H),
            now=now,
            status="ok",
            checks={},
        )
    assert last_completed_at(store, settings, now) == T0


def test_an_alert_judged_in_the_future_is_judged_anew(store: Store, settings: Settings) -> None:
    """An alert whose last evaluation is in the future no longer makes live runs stale."""
    now = T0 + 12 * H
    future = report(T0 + 100_000 * H, {"recall_coverage": Status.OK})
    process(store, settings, future, now=T0 + 100_000 * H)  # as an older version would have
    outcome = process(
        store, settings, report(T0 + 8 * H, {"recall_coverage": Status.BREACHED}), now=now
    )
    assert not outcome.stale
    assert outcome.firing == ("recall_coverage",)
    (record,) = [r for r in alert_states(store, settings) if r.alert.check_id == "recall_coverage"]
    assert record.alert.last_at == T0 + 8 * H


def test_health_never_reports_a_negative_age_as_fine() -> None:
    """/healthz answers 503 when the last run ends well in this host's future."""
    code, body = health(-timedelta(days=1), timedelta(hours=4))
    assert (code, body["status"]) == (503, "clock")
    assert health(-timedelta(minutes=1), timedelta(hours=4))[0] == 200  # within the clock skew


def test_cron_aligned_at_is_live_and_an_older_window_is_a_replay() -> None:
    """`--at` of the window that just ended (cron's) is live; one ended longer ago is a replay."""
    now = T0 + 4 * H + timedelta(minutes=2)
    assert kind_of_run(T0 + 4 * H, now, 4 * H) == "live"
    assert kind_of_run(now, now, 4 * H) == "live"
    assert kind_of_run(T0 - 72 * H, now, 4 * H) == "replay"
