"""Canary secrets: the store password and every receiver's secrets appear in no output.

A canary password, Slack token and webhook secret, an Alertmanager password,
a Telegram bot token (which sits in the URL path) and a token a generic
webhook's path takes from `${HOOK_TOKEN}` (its consumer echoing it back in
every refusal) never appear in CLI
stdout and stderr (with `--debug` too), JSON and HTML reports, alert
messages, `alerts`, `status`, `notify-test`, `config check`, the state
tables, the daemon's log and spool, or the OpenTelemetry it exports.
(Split from tests/test_security.py, whose helpers and fixtures it shares.)
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.alerts.http_standin import ECHO, AlertmanagerStandIn, WebhookStandIn
from tests.alerts.slack_standin import OK, SERVER_ERROR, SlackStandIn
from tests.alerts.telegram_standin import TelegramStandIn
from tests.builder import unique_table
from tests.faults.chserver import ClickHouseHTTPServer
from tests.otlp_standin import OTLPCollector
from tests.test_security import (  # the fixtures `server` and `slack` are shared with it
    AM_CANARY,
    BIN,
    HOOK_CANARY,
    PASSWORD,
    PATH_CANARY,
    REPO,
    TG_CANARY,
    TOKEN_CANARY,
    Outputs,
    clean_env,
    run_cli,
    server,
    slack,
    world,
)
from watchdog.core.store import Store

__all__ = ["server", "slack"]  # fixtures pytest finds here


def secret_config(tmp_path: Path, table: str, database: str, slack: str, hook: str) -> Path:
    """Slack (webhook or token) and the other receivers with secrets, all from ${ENV}; the
    webhook's host and path written in the file, its token from ${HOOK_TOKEN}."""
    cfg = tmp_path / f"{database}.toml"
    if slack == "webhook":
        alerts = 'webhook_url = "${SLACK_WEBHOOK_URL}"'
    else:
        alerts = 'token = "${SLACK_TOKEN}"\nchannel = "#memory"\nbase_url = "${SLACK_API}"'
    cfg.write_text(
        f'[store]\ndatabase = "{database}"\nquery_timeout = "10s"\n'
        f'[source]\ntable = "{table}"\n'
        f'[alerts]\ndelivery_timeout = "3s"\n[alerts.slack]\n{alerts}\ntimeout = "2s"\n'
        '[alerts.alertmanager.prod]\nurl = "${AM_URL}"\nbasic_auth_user = "watchdog"\n'
        'basic_auth_password = "${AM_PASSWORD}"\ntimeout = "2s"\n'
        '[alerts.telegram.ops]\nbot_token = "${TELEGRAM_BOT_TOKEN}"\nchat_id = "-100123"\n'
        'api_url = "${TELEGRAM_API}"\ntimeout = "2s"\n'
        f"{webhook_table(hook)}",
        encoding="utf-8",
    )
    return cfg


def webhook_table(base: str) -> str:
    """A webhook at `base` (written in the file), the token of its path from the environment:
    the path's last segment, which the consumer's 404 echoes ("no such hook <it>")."""
    return f'[alerts.webhook.team]\nurl = "{base}/hooks/${{HOOK_TOKEN}}"\ntimeout = "2s"\n'


HOOK_TOKEN = f"T0/{PATH_CANARY}"


@pytest.fixture
def hook() -> Iterator[WebhookStandIn]:
    with WebhookStandIn(default=ECHO) as standin:
        yield standin


@pytest.fixture
def alertmanager() -> Iterator[AlertmanagerStandIn]:
    with AlertmanagerStandIn() as standin:
        yield standin


@pytest.fixture
def telegram() -> Iterator[TelegramStandIn]:
    with TelegramStandIn() as standin:
        yield standin


@pytest.mark.slow
def test_canary_secrets_appear_in_no_output(
    store: Store,
    server: ClickHouseHTTPServer,
    slack: SlackStandIn,
    alertmanager: AlertmanagerStandIn,
    telegram: TelegramStandIn,
    hook: WebhookStandIn,
    tmp_path: Path,
) -> None:
    """Store password and every receiver's secrets: in no stdout, stderr, report, message or log."""
    table = unique_table()
    world(lambda s: s).write(store, table)
    database = f"wd_{uuid.uuid4().hex[:10]}"
    env = clean_env(
        tmp_path,
        SLACK_WEBHOOK_URL=f"{slack.base}/services/T0CANARY/B0CANARY/{HOOK_CANARY}",
        SLACK_TOKEN=f"xoxb-1111-{TOKEN_CANARY}",  # not the stand-in's token: invalid_auth
        SLACK_API=slack.api_url,
        AM_URL=alertmanager.url,
        AM_PASSWORD=AM_CANARY,
        # Not the stand-in's bot: 401 Unauthorized, an error line about a URL holding it.
        TELEGRAM_BOT_TOKEN=f"987654321:{TG_CANARY}AAAAAAAAAAAAAAAAAAAAAA",
        TELEGRAM_API=telegram.api_url,
        HOOK_TOKEN=HOOK_TOKEN,
    )
    webhook = str(secret_config(tmp_path, table, database, "webhook", hook.base))
    # Fresh state for each failing case, so that each has a message to (fail to) send.
    failing = str(secret_config(tmp_path, table, database + "_500", "webhook", hook.base))
    token = str(secret_config(tmp_path, table, database + "_token", "token", hook.base))
    url = server.url()
    assert PASSWORD in url
    out = Outputs()
    html = tmp_path / "report.html"
    at = [f"2026-11-28T{h:02d}:00:00Z" for h in (4, 8, 12, 16, 20)]

    # --debug prints everything the plain run prints, and the third-party logs besides.
    run_cli(out, env, "check", "--store", url, "--config", webhook, "--at", at[0], "--debug")
    run_cli(
        out, env, "check", "--store", url, "--config", webhook, "--at", at[0], "--format", "json"
    )
    run_cli(
        out,
        env,
        "check",
        "--store",
        url,
        "--config",
        webhook,
        "--at",
        at[0],
        "--format",
        "html",
        "--output",
        str(html),
    )
    out.add("html report", html.read_text(encoding="utf-8"))
    # Alerts: delivered, then Slack failing (500), then a rejected token, each with --debug.
    sent = run_cli(
        out, env, "check", "--store", url, "--config", webhook, "--at", at[1], "--notify", "--debug"
    )
    assert sent.returncode == 1 and slack.delivered(), sent.stderr
    slack.default = SERVER_ERROR
    run_cli(
        out, env, "check", "--store", url, "--config", failing, "--at", at[2], "--notify", "--debug"
    )
    slack.default = OK
    bad_token = run_cli(
        out, env, "check", "--store", url, "--config", token, "--at", at[3], "--notify", "--debug"
    )
    assert "invalid_auth" in bad_token.stderr
    # The store unreachable and the password rejected, with --notify and --debug.
    for store_url in (
        f"http://default:{PASSWORD}@127.0.0.1:9/default",
        server.url(password=PASSWORD + "-wrong"),
    ):
        failed = run_cli(
            out,
            env,
            "check",
            "--store",
            store_url,
            "--config",
            webhook,
            "--at",
            at[4],
            "--notify",
            "--debug",
        )
        assert failed.returncode == 3
    # Every command that shows state or describes a notifier (`silence` shows neither).
    for args in (["alerts", "--format", "json"], ["status", "--debug"], ["notify-test", "--debug"]):
        run_cli(out, env, args[0], "--store", url, "--config", webhook, *args[1:])
    run_cli(out, env, "notify-test", "--store", url, "--config", token, "--debug")
    config_check = run_cli(out, env, "config", "check", "--store", url, "--config", webhook)
    assert "alertmanager.prod" in config_check.stdout and "telegram.ops" in config_check.stdout
    assert f"webhook.team (Alertmanager webhook {hook.base}/hooks/${{HOOK_TOKEN}})" in (
        config_check.stdout
    )
    assert hook.requests and all(r.path.endswith(PATH_CANARY) for r in hook.requests)
    assert "no such hook ***" in sent.stderr  # the consumer's echo of the token, masked
    for request in slack.requests:
        out.add(f"slack message {request.path[:20]}", request.raw)
    assert alertmanager.delivered() and telegram.requests  # both were sent to (and said so)
    for posted in alertmanager.requests + telegram.requests:  # bodies: headers carry the secret
        out.add("alertmanager or telegram body", json.dumps(posted.body, ensure_ascii=False))
    state = store.query(
        f"SELECT toJSONString(tuple(*)) FROM {database}.outbox"
        f" UNION ALL SELECT toJSONString(tuple(*)) FROM {database}.runs"
        f" UNION ALL SELECT toJSONString(tuple(*)) FROM {database}.alert_state"
    ).rows
    out.add("state tables", "\n".join(str(row[0]) for row in state))
    assert len(out.texts) > 30
    assert out.leaks() == []


def run_daemon(env: dict[str, str], cfg: Path, store_url: str, runs: int) -> str:
    """`memory-watchdog daemon` until `runs` runs are logged (bounded), then SIGTERM; its log."""
    proc = subprocess.Popen(
        [str(BIN), "daemon", "--config", str(cfg), "--store", store_url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and proc.poll() is None:
        if sum(1 for line in list(lines) if re.search(r"judged|caught up|store", line)) >= runs:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    return "".join(lines)


@pytest.mark.slow
def test_canary_secrets_stay_out_of_the_daemon_log_spool_and_telemetry(
    store: Store,
    server: ClickHouseHTTPServer,
    slack: SlackStandIn,
    hook: WebhookStandIn,
    tmp_path: Path,
) -> None:
    """The daemon's log, its spool, the status it leaves and its OTLP export hold no secret."""
    table = unique_table()
    world(lambda s: s).write(store, table)
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(
        f'[store]\ndatabase = "wd_{uuid.uuid4().hex[:10]}"\nquery_timeout = "5s"\n'
        f'[source]\ntable = "{table}"\n'
        '[schedule]\nevery = "2s"\ndelay = "0s"\nmax_catchup = 2\n'
        "[checks.telemetry_freshness]\ntarget = 1\n"
        '[alerts.slack]\nwebhook_url = "${SLACK_WEBHOOK_URL}"\ntimeout = "2s"\n'
        f"{webhook_table(hook.base)}",
        encoding="utf-8",
    )
    collector = OTLPCollector()
    out = Outputs()
    try:
        env = clean_env(
            tmp_path,
            SLACK_WEBHOOK_URL=f"{slack.base}/services/T0CANARY/B0CANARY/{HOOK_CANARY}",
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            HOOK_TOKEN=HOOK_TOKEN,
        )
        log = run_daemon(env, cfg, server.url(), runs=2)
        out.add("daemon log", log)
        # The store unreachable: the spool and the direct Slack alert path.
        down = f"http://default:{PASSWORD}@127.0.0.1:9/default"
        out.add("daemon log, store down", run_daemon(env, cfg, down, runs=2))
        run_cli(
            out, env, "status", "--store", server.url(), "--config", str(cfg), "--format", "json"
        )
    finally:
        collector.close()
    assert collector.bodies, "the daemon exported no telemetry"
    for body in collector.bodies:
        out.add("otlp export", body.decode("latin-1"))
    for path in (tmp_path / "xdg").rglob("*"):
        if path.is_file():
            out.add(f"data dir {path.name}", path.read_bytes().decode("latin-1"))
    for request in slack.requests:
        out.add("slack message", request.raw)
    assert slack.requests, "the daemon sent nothing to Slack"
    assert hook.requests and all(r.path.endswith(PATH_CANARY) for r in hook.requests)
    assert "no such hook ***" in log  # the webhook's refusal, the token it echoed masked
    assert out.leaks() == []
