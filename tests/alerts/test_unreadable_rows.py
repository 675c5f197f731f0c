"""An outbox row this version cannot read is set aside as rejected and the rest are sent (issue
45 point 1: one such row made `check --notify` an internal error and killed every daemon tick).

Each hostile row starts as a real message waiting in the outbox (its receiver was down) and has
its payload spoiled in the store, as a bug, a hand edit or another version could leave it. A
silence in force covers one of its two alerts, so the send-time re-render is reached too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from alerts.outbox import pending_rows
from alerts.records import outbox_backlog
from alerts.rows import OutboxStatus
from alerts.state import OUTBOX, table
from alerts.testing import RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H
from tests.alerts.slack_standin import OK, SERVER_ERROR, SlackStandIn
from tests.alerts.test_pipeline import run
from tests.alerts.test_silence_at_send import silence, statuses_of
from tests.builder import M
from tests.daemon_rig import DELAY, end, new_rig, write_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store

CANARY = "CANARY-payload-value"
FIRST = {"recall_coverage": Status.BREACHED, "write_gate_drift": Status.BREACHED}
SECOND = {**FIRST, "observe_coverage": Status.BREACHED}

Spoil = Callable[[dict[str, Any]], Any]


def _alert(change: Callable[[dict[str, Any]], object]) -> Spoil:
    """A spoiler changing the payload's first alert's facts in place."""

    def spoil(payload: dict[str, Any]) -> Any:
        change(payload["alerts"][0])
        return payload

    return spoil


def _set(key: str, value: object) -> Spoil:
    return lambda payload: {**payload, key: value}


SPOILED: dict[str, Spoil] = {
    "a JSON array": lambda payload: [],
    "no JSON": lambda payload: '{"text": "' + CANARY,
    "an alert missing fields": _set("alerts", [{"check_id": "recall_coverage", "kind": "fire"}]),
    "an alert that is no object": _set("alerts", [CANARY]),
    "an unknown kind": _alert(lambda a: a.update(kind=CANARY)),
    "an alert time that is no time": _alert(lambda a: a.update(at=CANARY)),
    "a count that is text": _alert(lambda a: a.update(evidence_more=CANARY)),
    "blocks that are no list": _set("blocks", CANARY),
    "a context that is no object": _set("context", [CANARY]),
    "a context alert missing fields": _set("context", {"alerts": [{"check_id": CANARY}]}),
}


def spoil(store: Store, settings: Settings, how: Spoil) -> str:
    """The one pending row rewritten with its payload spoiled (`how`); its id."""
    (row,) = pending_rows(store, settings)
    payload = json.loads(row.payload)
    payload["text"] = f"{CANARY} {payload['text']}"
    spoiled = how(payload)
    text = spoiled if isinstance(spoiled, str) else json.dumps(spoiled)
    bad = replace(row, payload=text, version=row.version + 1)
    store.insert(table(settings, "outbox"), [OUTBOX.row(bad)], list(OUTBOX.columns))
    return row.id


def waiting_spoiled(store: Store, settings: Settings, how: Spoil, chat: RecordingNotifier) -> str:
    """A message of two alerts waiting (the receiver down), spoiled, one of its alerts silenced;
    the receiver back. The row's id."""
    chat.fail_with("connection refused")
    run(store, settings, T0, FIRST, chat)
    row_id = spoil(store, settings, how)
    silence(store, settings, "recall_coverage", T0 + M)
    chat.recover()
    return row_id


@pytest.mark.parametrize("how", SPOILED.values(), ids=SPOILED.keys())
def test_an_unreadable_outbox_row_is_set_aside_and_the_next_message_is_sent(
    store: Store, settings: Settings, how: Spoil
) -> None:
    """The spoiled row is rejected, the run's own message still goes out."""
    chat = RecordingNotifier()
    row_id = waiting_spoiled(store, settings, how, chat)
    outcome = run(store, settings, T0 + 4 * H, SECOND, chat)
    assert [m.plain.count("FIRING observe_coverage") for m in chat.sent] == [1]
    assert statuses_of(store, settings)[row_id] == OutboxStatus.REJECTED.value
    assert outcome.delivery.rejected == 1 and outcome.delivery.pending == 0
    (backlog,) = outbox_backlog(store, settings)
    assert (backlog.rejected, backlog.delivered, backlog.pending) == (1, 1, 0)


@pytest.mark.parametrize("how", SPOILED.values(), ids=SPOILED.keys())
def test_an_unreadable_row_is_said_in_one_line_naming_its_id_never_its_payload(
    store: Store, settings: Settings, how: Spoil
) -> None:
    """One line names the row set aside and why, with no value of its payload."""
    chat = RecordingNotifier()
    row_id = waiting_spoiled(store, settings, how, chat)
    outcome = run(store, settings, T0 + 4 * H, SECOND, chat)
    (line,) = [line for line in outcome.errors if row_id in line]
    assert "set aside" in line and "\n" not in line
    assert not [line for line in outcome.errors if CANARY in line]


# ---- the daemon's tick and `check --notify`, on a real store ----------------------------------


def test_a_daemon_tick_sets_an_unreadable_row_aside_and_delivers_its_run(
    store: Store, slack: SlackStandIn, tmp_path: Path
) -> None:
    """A tick meeting a row whose payload is `[]` sends its own message and counts the row."""
    rig = new_rig(store, write_source(store), slack, tmp_path)
    slack.default = SERVER_ERROR
    daemon = rig.daemon()
    rig.tick(daemon, end(5) + DELAY)
    row_id = spoil(store, rig.settings, SPOILED["a JSON array"])
    slack.default = OK
    rig.settings = rig.settings.model_copy(
        update={"alerts": rig.settings.alerts.model_copy(update={"repeat_interval": H})}
    )
    daemon = rig.daemon()
    rig.tick(daemon, end(6) + DELAY)
    assert [text.count("telemetry_freshness") > 0 for text in rig.slack_texts()] == [True]
    assert statuses_of(store, rig.settings)[row_id] == OutboxStatus.REJECTED.value
    (backlog,) = rig.status().backlog
    assert (backlog.rejected, backlog.delivered) == (1, 1)


ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent / "memory-watchdog"

# Run in processes of their own: the test process keeps its own embedded store open.
SETUP = """
import sys
from tests.builder import H, M, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("cold").starts(T0 + H).ends(T0 + H + 10 * M).observes(T0 + H + 11 * M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""
SPOIL = """
import json, sys
from dataclasses import replace
from alerts.outbox import pending_rows
from alerts.state import OUTBOX, table
from watchdog.core.settings import load_settings
from watchdog.runner.plugins import PLUGINS
from watchdog.core.store import open_store
settings = load_settings(sys.argv[2], plugins=PLUGINS, env={})
with open_store(sys.argv[1]) as store:
    (row,) = pending_rows(store, settings)
    bad = replace(row, payload=sys.argv[3], version=row.version + 1)
    store.insert(table(settings, "outbox"), [OUTBOX.row(bad)], list(OUTBOX.columns))
    print(row.id)
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = "/nonexistent-xdg"
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.mark.slow
def test_check_notify_sets_an_unreadable_row_aside_and_sends_the_rest(
    tmp_path: Path, slack: SlackStandIn
) -> None:
    """`check --notify` over a store holding a `[]` row: its exit code, its message sent, one
    line naming the row, and `alerts` counting it rejected."""
    url = f"chdb://{tmp_path / 'store'}"
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[store]\ndatabase = "wd_{uuid.uuid4().hex[:8]}"\n[alerts]\ndelivery_timeout = "2s"\n'
        f'repeat_interval = "1h"\n[alerts.slack]\nwebhook_url = "{slack.webhook_url}"\n',
        encoding="utf-8",
    )
    common = ["--store", url, "--config", str(config)]
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT)
    slack.default = SERVER_ERROR
    cli("check", *common, "--at", "2026-11-28T06:00:00Z", "--notify")
    spoiled = subprocess.run(
        [sys.executable, "-c", SPOIL, url, str(config), f'["{CANARY}"]'],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    row_id = spoiled.stdout.strip()
    slack.default = OK
    done = cli("check", *common, "--at", "2026-11-28T08:00:00Z", "--notify")
    assert done.returncode == 1, done.stderr  # breached, as the report says
    assert "internal error" not in done.stderr and CANARY not in done.stderr
    assert [line for line in done.stderr.splitlines() if row_id in line and "set aside" in line]
    assert "1 message(s) delivered, 1 set aside (rejected)" in done.stderr
    assert len(slack.delivered()) == 1
    listed = cli("alerts", *common)
    assert "1 delivered, 0 dropped, 1 rejected" in listed.stdout, listed.stdout
