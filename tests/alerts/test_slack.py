"""The real slack-sdk against a local Slack stand-in: modes, retries, failures, secrets."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from alerts.base import Deadline, DeliveryError, Failure, Message
from alerts.notifiers import SlackNotifier, build_notifiers, mask_token, mask_webhook
from alerts.pipeline import process
from alerts.testing import FakeTimer
from checks.base import Status
from tests.alerts.conftest import T0, H, api_notifier, make_settings, report, webhook_notifier
from tests.alerts.slack_standin import (
    CHANNEL_NOT_FOUND,
    INVALID_AUTH,
    INVALID_BLOCKS,
    OK,
    SERVER_ERROR,
    TOKEN,
    WEBHOOK_PATH,
    SlackStandIn,
)
from watchdog.core.store import Store

MESSAGE = Message(
    id="m1",
    text="memory-watchdog: 1 firing",
    blocks=({"type": "section", "text": {"type": "mrkdwn", "text": "*recall_coverage* breached"}},),
    plain="memory-watchdog: 1 firing",
)
MODES = [webhook_notifier, api_notifier]


def deadline(seconds: float = 60, timer: FakeTimer | None = None) -> Deadline:
    return Deadline(timedelta(seconds=seconds), timer or FakeTimer())


def test_webhook_posts_blocks_and_text(slack: SlackStandIn) -> None:
    """Incoming webhook mode posts the Block Kit blocks and the text fallback, unfurling nothing."""
    webhook_notifier(slack).send(MESSAGE, deadline())
    [request] = slack.requests
    assert request.path == WEBHOOK_PATH
    assert request.body["blocks"] == [dict(b) for b in MESSAGE.blocks]
    assert request.body["text"] == MESSAGE.text
    assert request.body["unfurl_links"] is False


def test_bot_token_posts_chat_post_message(slack: SlackStandIn) -> None:
    """Bot token mode calls chat.postMessage with the channel, the blocks and the token."""
    api_notifier(slack).send(MESSAGE, deadline())
    [request] = slack.requests
    assert request.path == "/api/chat.postMessage"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.body["channel"] == "#memory-alerts"
    assert request.body["blocks"] == [dict(b) for b in MESSAGE.blocks]


@pytest.mark.parametrize(
    ("make", "reply", "code"),
    [
        (webhook_notifier, INVALID_AUTH, "invalid_token"),
        (webhook_notifier, CHANNEL_NOT_FOUND, "channel_not_found"),
        (api_notifier, INVALID_AUTH, "invalid_auth"),
        (api_notifier, CHANNEL_NOT_FOUND, "channel_not_found"),
    ],
)
def test_permanent_errors_name_slacks_error_code(
    slack: SlackStandIn, make: type[SlackNotifier], reply: object, code: str
) -> None:
    """A bad token or a missing channel is permanent, naming Slack's error code and the key."""
    slack.default = reply  # type: ignore[assignment]
    with pytest.raises(DeliveryError) as caught:
        make(slack).send(MESSAGE, deadline())
    assert caught.value.failure is Failure.PERMANENT
    assert code in caught.value.problem and "check alerts.slack" in caught.value.problem
    assert len(slack.requests) == 1


@pytest.mark.parametrize("make", MODES)
def test_invalid_blocks_falls_back_to_text(slack: SlackStandIn, make: type[SlackNotifier]) -> None:
    """Blocks Slack refuses are sent again as the text fallback alone."""
    slack.reply(INVALID_BLOCKS)
    make(slack).send(MESSAGE, deadline())
    first, second = slack.requests
    assert "blocks" in first.body and "blocks" not in second.body
    assert second.body["text"] == MESSAGE.text and second.delivered


def test_secrets_never_appear_in_descriptions_errors_or_logs(
    slack: SlackStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """The webhook path and the token are masked in describe(), error lines and slack-sdk's debug logs."""
    caplog.set_level(logging.DEBUG, logger="slack_sdk")
    hook, api = webhook_notifier(slack), api_notifier(slack)
    slack.default = INVALID_AUTH
    problems = []
    for notifier in (hook, api):
        with pytest.raises(DeliveryError) as caught:
            notifier.send(MESSAGE, deadline())
        problems.append(str(caught.value))
    shown = " ".join([hook.describe(), api.describe(), *problems, caplog.text])
    assert "s3cr3t" not in shown
    assert hook.describe() == f"slack (incoming webhook {slack.base}/services/***)"
    assert "xoxb-***" in api.describe()
    assert "Sending a request" in caplog.text  # the debug lines were there, masked


def test_masks() -> None:
    """Masking keeps what identifies the endpoint and hides what grants access."""
    assert (
        mask_webhook("https://hooks.slack.com/services/T0/B0/XYZ")
        == "https://hooks.slack.com/services/***"
    )
    assert mask_token("xoxb-123-456-abc") == "xoxb-***"
    assert mask_token("plain") == "***"


def test_config_builds_both_slack_modes() -> None:
    """[alerts.slack] with a webhook or a token builds the matching notifier; stdout when enabled."""
    hook = make_settings(
        {
            "alerts": {
                "slack": {"webhook_url": "https://hooks.slack.com/services/T/B/X"},
                "stdout": {},
            }
        }
    )
    built = build_notifiers(hook)
    assert sorted(built) == ["slack", "stdout"]
    assert "incoming webhook" in built["slack"].describe()
    bot = make_settings(
        {"alerts": {"slack": {"token": TOKEN, "channel": "#a", "quiet_hours": "22:00-07:00"}}}
    )
    slack_bot = build_notifiers(bot)["slack"]
    assert "channel #a" in slack_bot.describe() and slack_bot.quiet_hours is not None
    assert build_notifiers(make_settings()) == {}


def test_pipeline_slack_down_then_up_delivers_in_order_exactly_once(
    store: Store, slack: SlackStandIn
) -> None:
    """Through the real slack-sdk: two runs while Slack fails, then one run delivers all three in order."""
    settings = make_settings()
    notifier = webhook_notifier(slack, max_retries=1)
    slack.default = SERVER_ERROR

    def run(hours: int, statuses: dict[str, Status]) -> None:
        process(
            store,
            settings,
            report(T0 + hours * H, statuses),
            now=T0 + hours * H,
            notifiers={"slack": notifier},
            timer=FakeTimer(),
        )

    run(0, {"recall_coverage": Status.BREACHED})
    run(4, {"recall_coverage": Status.BREACHED, "observe_coverage": Status.BREACHED})
    assert slack.delivered() == [] and len(slack.requests) == 4  # 2 runs x (1 + 1 retry)
    slack.default = OK
    run(8, {"recall_coverage": Status.OK, "observe_coverage": Status.BREACHED})
    delivered = [r.text.split("\n")[1].split(" [")[0] for r in slack.delivered()]
    assert delivered == [
        "- FIRING recall_coverage",
        "- FIRING observe_coverage",
        "- RESOLVED recall_coverage",
    ]
    run(12, {"observe_coverage": Status.BREACHED})
    assert len(slack.delivered()) == 3


def test_pipeline_permanent_error_reported_once(store: Store, slack: SlackStandIn) -> None:
    """With a revoked webhook and a backlog, a run makes one request and reports one line."""
    settings = make_settings()
    notifier = webhook_notifier(slack)
    slack.default = INVALID_AUTH
    outcomes = [
        process(
            store,
            settings,
            report(T0 + i * 4 * H, {"recall_coverage": s}),
            now=T0 + i * 4 * H,
            notifiers={"slack": notifier},
            timer=FakeTimer(),
        )
        for i, s in enumerate([Status.BREACHED, Status.OK, Status.BREACHED])
    ]
    assert len(slack.requests) == 3  # one per run, never one per waiting message
    last = outcomes[-1]
    assert last.delivery.pending == 3 and len(last.errors) == 1
    assert "invalid_token" in last.errors[0] and "permanent" in last.errors[0]
    assert "s3cr3t" not in last.errors[0]
