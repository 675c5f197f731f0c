"""Hardening round 3 (issue 23), the receivers' part: what an attacker and bad luck broke.

Each test failed on the code before its fix (docs/guarantees.md lists them):
a webhook URL that is no URL crashed `config check`, control characters in a
TOML key reached the terminal raw, a PagerDuty redirect blamed the routing
key, and a webhook consumer echoing part of its secret URL put it on stderr
and in the outbox table.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from alerts.base import Deadline, DeliveryError, Failure, Message
from alerts.notifiers import PagerDutyNotifier, WebhookNotifier, build_notifiers
from alerts.pipeline import deliver, process
from alerts.testing import FakeTimer, RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H, make_settings, report
from tests.alerts.http_standin import (
    ECHO,
    HANG,
    OK,
    ROUTING_KEY,
    PagerDutyStandIn,
    WebhookStandIn,
    redirect,
    trickle,
)
from tests.alerts.receiver_rigs import firing_message
from watchdog.core.settings import Settings
from watchdog.core.store import Store

BIN = Path(sys.executable).parent / "memory-watchdog"


def run_cli(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "watchdog.toml"
    path.write_text(config, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    return subprocess.run(
        [str(BIN), *args, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        check=False,
    )


# ---- finding 10: one line, exit 2, escaped ------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://[::1]:99999/hook", "https://", "http:///no-host"]
)
@pytest.mark.slow
def test_a_webhook_url_that_is_no_url_is_one_config_line_exit_2(tmp_path: Path, url: str) -> None:
    """`config check` with webhook url = "http://[::1": exit 2 naming the key, not an internal error."""
    result = run_cli(
        tmp_path, f'[alerts.webhook.team]\nurl = "{url}"\n', "config", "check", "--no-store"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "alerts.webhook.team.url" in line and "internal error" not in line
    assert url not in line  # the URL is a secret: not echoed


@pytest.mark.slow
def test_control_characters_in_a_toml_key_are_escaped_on_one_line(tmp_path: Path) -> None:
    """A raw ESC or CR in a key is printed escaped, on one line, exit 2."""
    result = run_cli(
        tmp_path,
        '[alerts]\n"x\\u001b[31mred\\rhidden\\nsecond" = 1\n',
        "config",
        "check",
        "--no-store",
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "\x1b" not in line and "\r" not in line
    assert "alerts.x\\x1b[31mred\\rhidden\\nsecond: unknown key" in line


@pytest.mark.slow
def test_control_characters_in_a_receiver_name_are_escaped(tmp_path: Path) -> None:
    """A receiver name with an ESC is refused naming it escaped, exit 2."""
    result = run_cli(
        tmp_path,
        '[alerts.webhook."t\\u001b]0;title\\u0007"]\nurl = "http://127.0.0.1:9/hook"\n',
        "config",
        "check",
        "--no-store",
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "\x1b" not in line and "\x07" not in line
    assert "alerts.webhook.t\\x1b]0;title\\x07: a receiver name is" in line


# ---- finding 11: a redirect names the URL to fix ----------------------------------------


@pytest.fixture
def pd() -> Iterator[PagerDutyStandIn]:
    standin = PagerDutyStandIn()
    yield standin
    standin.close()


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_a_pagerduty_redirect_names_its_url_not_its_routing_key(
    pd: PagerDutyStandIn, code: int
) -> None:
    """A 307 from the Events API endpoint is not followed, and the line says to fix `url`."""
    pd.reply(redirect(code))
    receiver = PagerDutyNotifier(routing_key=ROUTING_KEY, url=pd.url, name="pagerduty.oncall")
    with pytest.raises(DeliveryError) as caught:
        receiver.send(firing_message(), Deadline(timedelta(seconds=30), FakeTimer()))
    assert caught.value.failure is Failure.PERMANENT
    assert "set alerts.pagerduty.oncall.url to the final address" in caught.value.problem
    assert "routing_key" not in caught.value.problem
    assert len(pd.requests) == 1


# ---- finding 7: every part of a secret URL is masked --------------------------------------

SEGMENT = "s3cr3t+segm%C3%A9nt"  # percent-encoded in the URL; the consumer echoes it decoded
QUERY = "qu3ry/v%C3%A1lue"


def secret_url(hook: WebhookStandIn) -> str:
    return f"{hook.base}/hooks/{SECRET_PATH}?key={quote(QUERY, safe='%')}"


SECRET_PATH = f"T0KENPART/{quote(SEGMENT, safe='%+')}"


def secret_parts() -> list[str]:
    """Each secret part of the URL, raw and decoded (what a consumer may echo)."""
    from urllib.parse import unquote, unquote_plus

    return ["T0KENPART", SEGMENT, unquote(SEGMENT), QUERY, unquote_plus(QUERY), unquote(QUERY)]


def test_a_consumer_echoing_part_of_its_secret_url_shows_no_part_of_it(
    hook: WebhookStandIn,
) -> None:
    """A 404 "no such hook <segment>" and an echoed query value are masked, raw and decoded."""
    hook.reply(ECHO)
    receiver = WebhookNotifier(url=secret_url(hook), name="webhook.team")
    with pytest.raises(DeliveryError) as caught:
        receiver.send(firing_message(), Deadline(timedelta(seconds=30), FakeTimer()))
    assert "no such hook" in caught.value.problem  # the consumer's words, masked
    shown = str(caught.value) + receiver.describe()
    assert [part for part in secret_parts() if part in shown] == []


def test_a_secret_url_echoed_by_its_consumer_stays_out_of_the_outbox_table(
    store: Store, hook: WebhookStandIn
) -> None:
    """The outbox's last_error, written from the consumer's echo, holds no part of the URL.

    The path from the environment, as a token is configured (a path the file writes is shown);
    the query value is written in the file, and masked all the same.
    """
    written = secret_url(hook).replace(SECRET_PATH, "${HOOK_TOKEN}")
    settings = make_settings(
        {"alerts": {"webhook": {"team": {"url": written}}}}, env={"HOOK_TOKEN": SECRET_PATH}
    )
    hook.default = ECHO
    outcome = process(
        store,
        settings,
        report(T0, {"recall_coverage": Status.BREACHED}),
        now=T0,
        notifiers=build_notifiers(settings),
        timer=FakeTimer(),
    )
    assert outcome.delivery.pending == 1
    rows = store.query(f"SELECT last_error FROM `{settings.store.database}`.outbox FINAL").rows
    stored = " ".join(str(r[0]) for r in rows) + " ".join(outcome.errors)
    assert "no such hook" in stored
    assert [part for part in secret_parts() if part in stored] == []


# ---- finding 4: a trickling receiver: bounded delivery, lanes of their own ----------------

BREACH_TWO = {"recall_coverage": Status.BREACHED, "recall_latency_p95": Status.BREACHED}


def two_receivers(hook: WebhookStandIn, pd: PagerDutyStandIn) -> Settings:
    """A webhook and PagerDuty, with a 2s alerts.delivery_timeout."""
    return make_settings(
        {
            "alerts": {
                "delivery_timeout": "2s",
                "webhook": {"team": {"url": hook.url}},
                "pagerduty": {"oncall": {"routing_key": ROUTING_KEY, "url": pd.url}},
            }
        }
    )


def test_a_trickling_receiver_is_cut_at_the_delivery_timeout(
    store: Store, hook: WebhookStandIn, pd: PagerDutyStandIn
) -> None:
    """An answer that comes a byte at a time is cut at delivery_timeout; the others still go."""
    settings = two_receivers(hook, pd)
    hook.default = trickle(0.2, 150)  # 30s of answer, a byte every 0.2s: each read is quick
    outcome = process(  # the real clock: the deadline is wall time
        store, settings, report(T0, BREACH_TWO), now=T0, notifiers=build_notifiers(settings)
    )
    [cut] = hook.requests
    assert 0 < cut.sent < 150 and not cut.delivered  # the client hung up mid-answer
    assert len(pd.events()) == 2  # PagerDuty's lane did not wait for the webhook's
    assert outcome.delivery.pending == 1
    [line] = [e for e in outcome.errors if e.startswith("webhook.team")]
    assert "no complete answer within alerts.delivery_timeout" in line
    hook.default = OK  # the next run delivers it
    later = process(
        store,
        settings,
        report(T0 + 4 * H, BREACH_TWO),
        now=T0 + 4 * H,
        notifiers=build_notifiers(settings),
    )
    assert later.delivery.pending == 0 and len(hook.documents()) == 1


def test_an_answer_cut_inside_its_headers_is_no_delivery(
    store: Store, hook: WebhookStandIn, pd: PagerDutyStandIn
) -> None:
    """A `200` status line whose headers never end within delivery_timeout is no complete
    answer: the message waits for the next run (http.client takes the cut for the headers' end)."""
    settings = two_receivers(hook, pd)
    hook.default = trickle(0.02, 1000)  # the status line in 0.4s, the headers' end in 20s
    outcome = process(
        store, settings, report(T0, BREACH_TWO), now=T0, notifiers=build_notifiers(settings)
    )
    [cut] = hook.requests
    assert len(b"HTTP/1.1 200 OK\r\n") < cut.sent < 1000 and not cut.delivered
    assert outcome.delivery.pending == 1  # the webhook's message, kept for the next run
    [line] = [e for e in outcome.errors if e.startswith("webhook.team")]
    assert "no complete answer within alerts.delivery_timeout" in line


def test_a_hanging_receiver_never_delays_another_receivers_messages(
    store: Store, hook: WebhookStandIn, pd: PagerDutyStandIn
) -> None:
    """A webhook that never answers costs its own messages a run; PagerDuty's go at once."""
    settings = two_receivers(hook, pd)
    hook.default = HANG
    outcome = process(
        store, settings, report(T0, BREACH_TWO), now=T0, notifiers=build_notifiers(settings)
    )
    assert [e["event_action"] for e in pd.events()] == ["trigger", "trigger"]
    assert sorted(outcome.delivery.delivered) == sorted(
        r for r in outcome.enqueued if r not in _rows_of(store, settings, "webhook.team")
    )
    assert outcome.delivery.pending == 1


def _rows_of(store: Store, settings: Settings, notifier: str) -> set[str]:
    rows = store.query(
        f"SELECT id FROM `{settings.store.database}`.outbox FINAL WHERE notifier = {{n:String}}",
        {"n": notifier},
    ).rows
    return {str(r[0]) for r in rows}


@dataclass
class CountingOpener:
    """Opens the (shared) store for each use, counting the uses in progress."""

    store: Store
    open: int = 0
    opened: int = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[Store]:
        self.open += 1
        self.opened += 1
        try:
            yield self.store
        finally:
            self.open -= 1


@dataclass
class StoreWatchingNotifier(RecordingNotifier):
    """Records, at each send, how many uses of the store were in progress."""

    opener: CountingOpener | None = None
    open_while_sending: list[int] = field(default_factory=list)

    def send(self, message: Message, deadline: Deadline) -> None:
        assert self.opener is not None
        self.open_while_sending.append(self.opener.open)
        super().send(message, deadline)


def test_delivery_holds_the_store_only_while_it_writes(store: Store) -> None:
    """Enqueued without delivering, then delivered with the store opened per write: never open
    while a receiver answers (what the daemon's tick needs to leave the store's turn)."""
    settings = make_settings()
    opener = CountingOpener(store)
    chat = StoreWatchingNotifier(name="chat", opener=opener)
    enqueued = process(
        store,
        settings,
        report(T0, BREACH_TWO),
        now=T0,
        notifiers={"chat": chat},
        deliver=False,
    )
    assert len(enqueued.enqueued) == 1 and enqueued.delivery.delivered == () and chat.sent == []
    delivered = deliver(opener, settings, now=T0, notifiers={"chat": chat}, timer=FakeTimer())
    assert delivered.delivered == enqueued.enqueued and len(chat.sent) == 1
    assert chat.open_while_sending == [0]
    assert opener.opened >= 3  # the rows to send, the send's mark, its outcome
