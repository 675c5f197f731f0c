"""Security: data values are data, secrets stay secret, text from data is escaped, grants are few.

- Hostile strings (quotes, `--`, `;`, `{}`, `$`, backslashes) in event names,
  session ids, event ids and payloads, and in the config values that are
  data (event role names, the ignore list, the deviation vocabulary and
  envelope keys), give the verdicts of a clean run once renamed back: on the
  embedded engine and over HTTP, where bound parameters travel as
  `param_*` fields.
- Canary secrets (the store password and every receiver's secrets: a Slack
  token and webhook secret, an Alertmanager password, a Telegram bot token in
  the URL path, a token a generic webhook's path takes from `${HOOK_TOKEN}`,
  its consumer echoing it back in every refusal) never appear in any output:
  CLI stdout and stderr (with `--debug` too), JSON and HTML reports, alert
  messages, `alerts`, `status`, `notify-test`, `config check`, the state
  tables, the daemon's log and spool, or the OpenTelemetry it exports.
- Slack mention and link syntax and HTML in session ids reach neither chat
  nor the page unescaped.
- The statements the watchdog sends to a server need no more than the
  GRANT statements of docs/operations.md.

Config SQL (column expressions, session filters, custom check predicates) is
SQL by design and trusted like a datasource query in Grafana: no test here
feeds hostile SQL through it; docs/guarantees.md says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.http_standin import ECHO, AlertmanagerStandIn, WebhookStandIn
from tests.alerts.slack_standin import OK, SERVER_ERROR, SlackStandIn
from tests.alerts.telegram_standin import TelegramStandIn
from tests.builder import T0, H, M, S, Scenario, unique_table
from tests.faults.chserver import ClickHouseHTTPServer
from tests.otlp_standin import OTLPCollector
from watchdog.core.settings import EventSettings, Settings, settings_from_mapping
from watchdog.core.store import Store, open_store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
AT_TEXT = "2026-11-28T04:00:00Z"
BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]

# Every character that could end a literal, start a comment or a placeholder, or expand.
# (`${NAME}` itself is left out: config strings expand it by design, with no escape.)
HOSTILE = "'\"`;--{x:String}{}$1$HOME\\ /*"

PASSWORD = "PwCanary-5b1e"
TOKEN_CANARY = "TokCanary-8d2f"
HOOK_CANARY = "HookCanary-c07a"
AM_CANARY = "AmPwCanary-7c1d"  # an Alertmanager's basic auth password
TG_CANARY = "TgCanary_3e9a"  # the secret part of a Telegram bot token (it sits in the URL path)
PATH_CANARY = "PathCanary-4e6b"  # a token a webhook's path takes from `${HOOK_TOKEN}`
CANARIES = (PASSWORD, TOKEN_CANARY, HOOK_CANARY, AM_CANARY, TG_CANARY, PATH_CANARY)


# ---- hostile data and config values --------------------------------------------------


def hostile(text: str) -> str:
    """The name with the hostile suffix ('' stays '': it means "no session")."""
    return f"{text}{HOSTILE}" if text else text


def renamed_back(value: Any) -> Any:
    """`value` with the hostile suffix removed from every string in it."""
    if isinstance(value, str):
        return value.replace(HOSTILE, "")
    if isinstance(value, dict):
        return {renamed_back(k): renamed_back(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [renamed_back(v) for v in value]
    return value


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


def world(h: Callable[[str], str]) -> Scenario:
    """Sessions that give every built-in check something to judge, named through `h`."""
    sc = Scenario()

    def emit(name: str, ts: Any, session: str | None, **fields: Any) -> str:
        event_id = h(sc.next_id())
        sc.event(h(name), ts, h(session) if session else session, id=event_id, **fields)
        return event_id

    for i in range(24):
        s, t = f"s{i:02d}", T0 + H + i * M
        emit("session.started", t, s)
        emit("memory.recall.started", t + S, s)
        emit(
            "memory.recall.completed",
            t + 2 * S,
            s,
            meta={"latency_ms": 100 + 150 * i, "result_count": i % 2},
        )
        if i % 2 and i % 4 != 1:
            emit("memory.recall.injected", t + 3 * S, s)
        emit(
            "memory.gate.decision", t + 4 * S, s, meta={"verdict": "discard" if i % 3 else "allow"}
        )
        # A question recalled at its own millisecond, then answered; a greeting answered
        # at once (trivial: owes nothing); every seventh session answers a second
        # question without recalling (recall_before_response).
        emit("message.received", t + S, s)
        emit("message.sent", t + 3 * S, s)
        emit("message.received", t + 5 * M, s, meta={h("kind"): h("greeting")})
        emit("message.sent", t + 5 * M + S, s)
        if i % 7 == 0:
            emit("message.received", t + 6 * M, s)
            emit("message.sent", t + 6 * M + S, s)
        if i % 8 != 3:  # lost observes
            emit("memory.observe.requested", t + 10 * M, s)
            done = "observe.store.failed" if i % 6 == 0 else "observe.store.completed"
            emit(done, t + 10 * M + S, s)
        if i % 5 != 4:  # the others end silently, judged after idle_timeout (not in W)
            emit("session.ended", t + 11 * M, s)
    for i in range(2):  # cold starts
        emit("session.started", T0 + 2 * H + i * M, f"cold{i}")
        emit("session.ended", T0 + 2 * H + i * M + 5 * M, f"cold{i}")
    emit("session.started", T0 + 2 * H, "interactive")  # a placeholder: never a session
    for i in range(4):  # four consecutive failures: the circuit breaker
        emit("memory.recall.failed", T0 + 3 * H + i * S, "s01", success=0)
    cited = h("ev-000003")
    payloads = [
        {"agente": h("po"), "tipo": h("laco"), "evidenceEventIds": [cited]},
        {"agente": h("po"), "tipo": h("laco"), "evidenceEventIds": [h("missing")], h("env"): 1},
        {"agente": h("qa"), "tipo": "desvio", "evidenceEventIds": []},  # tipo not in vocabulary
        {"agente": h("qa"), "tipo": h("laco"), h("nota"): "free text"},  # a key not allowed
    ]
    for i, payload in enumerate(payloads):
        emit(
            "anamnese.agent_deviation",
            T0 + 3 * H + i * M,
            "s02",
            metadata_json=json.dumps({**payload, "session_id": h("s02")}),
        )
    return sc


def configured(table: str, h: Callable[[str], str]) -> Settings:
    """Settings whose data-valued keys (role names, ignore list, vocabulary) go through `h`."""
    defaults = EventSettings()
    events: dict[str, str | list[str]] = {}
    for role in EventSettings.model_fields:  # role names, and the trivial-message field and kinds
        value = getattr(defaults, role)
        events[role] = h(value) if isinstance(value, str) else [h(n) for n in value]
    return settings_from_mapping(
        {
            "source": {
                "table": table,
                "ignore_sessions": [h(s) for s in ("", "interactive", "gateway", "unknown")],
            },
            "events": events,
            "deviation": {
                "tipos": [
                    h(t) for t in ("laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario")
                ],
                "envelope_keys": ["session.id", "session_id", "sessionId", h("env")],
                # A hostile agente is no agent name: the configured list is the vocabulary,
                # so the names travel as a bound parameter too.
                "agents": [h("po"), h("qa")],
            },
        },
        plugins=PLUGINS,
        env={},
    )


@pytest.fixture(scope="module")
def hostile_and_clean(store: Store) -> tuple[Settings, Settings, dict[str, Any]]:
    """Both worlds written; the clean run's report."""
    clean_table, hostile_table = unique_table(), unique_table()
    world(lambda s: s).write(store, clean_table)
    world(hostile).write(store, hostile_table)
    clean = configured(clean_table, lambda s: s)
    report = run_once(store, clean, window_at(clean, AT)).to_json()
    return clean, configured(hostile_table, hostile), report


def test_the_clean_world_exercises_every_check(
    hostile_and_clean: tuple[Settings, Settings, dict[str, Any]],
) -> None:
    """The reference run has a verdict (not no_data) for every check, breaches included."""
    _, _, report = hostile_and_clean
    statuses = {check_id: r["status"] for check_id, r in report["checks"].items()}
    assert all(s in ("ok", "breached") for s in statuses.values()), statuses
    assert {"ok", "breached"} <= set(statuses.values())
    assert report["deviations"]["by_agent_and_type"] == [
        {"agente": "po", "tipo": "laco", "count": 2}
    ]


@pytest.mark.parametrize("path", ["embedded", "http"])
def test_hostile_names_ids_and_config_values_change_no_verdict(
    store: Store, hostile_and_clean: tuple[Settings, Settings, dict[str, Any]], path: str
) -> None:
    """Quotes, --, ;, {}, $ in data and in data-valued config are data: same verdicts renamed back."""
    _, hostile_settings, clean_report = hostile_and_clean
    if path == "embedded":
        got = run_once(store, hostile_settings, window_at(hostile_settings, AT)).to_json()
    else:
        with (
            ClickHouseHTTPServer(store.client) as server,
            open_store(server.url(), query_timeout_s=30) as http_store,
        ):
            got = run_once(http_store, hostile_settings, window_at(hostile_settings, AT)).to_json()
            sent = [r.query for r in server.requests]
        assert not any(HOSTILE in q for q in sent), "a data value was spliced into SQL"
    assert any(HOSTILE in text for text in strings(got))  # the hostile names did come back
    assert renamed_back(got) == {**clean_report, "source": renamed_back(got["source"])}


# ---- secrets never appear in any output ------------------------------------------------


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[ClickHouseHTTPServer]:
    """A ClickHouse HTTP server over the test engine whose password is the canary."""
    with ClickHouseHTTPServer(store.client, users={"default": PASSWORD}) as chs:
        yield chs


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn()
    yield standin
    standin.close()


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "OTEL_", "SLACK_"))
    }
    return {**env, "XDG_DATA_HOME": str(tmp_path / "xdg"), **extra}


@dataclass
class Outputs:
    """Everything a run of commands wrote, to grep for canaries."""

    texts: list[tuple[str, str]] = field(default_factory=list)  # (what, text)

    def add(self, what: str, text: str) -> None:
        self.texts.append((what, text))

    def leaks(self) -> list[str]:
        return [
            f"{what}: {canary}"
            for what, text in self.texts
            for canary in CANARIES
            if canary in text
        ]


def run_cli(
    outputs: Outputs, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    outputs.add(f"{' '.join(args[:3])} stdout", result.stdout)
    outputs.add(f"{' '.join(args[:3])} stderr", result.stderr)
    # A crash would pass a grep vacuously: only our own errors (tracebacks with --debug).
    last = (result.stderr.strip().splitlines() or [""])[-1]
    assert not re.match(r"\w+(Error|Exception)\b", last), result.stderr
    assert "--debug" in args or "Traceback" not in result.stderr, result.stderr
    return result


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

    # --debug prints everything the plain run prints, and the third-party logs besides: each
    # report format is written by a run with --debug (text here, JSON and HTML below).
    run_cli(out, env, "check", "--store", url, "--config", webhook, "--at", at[0], "--debug")
    # Alerts: delivered, then Slack failing (500), then a rejected token, each with --debug.
    sent = run_cli(
        out,
        env,
        "check",
        "--store",
        url,
        "--config",
        webhook,
        "--at",
        at[1],
        "--notify",
        "--debug",
        "--format",
        "json",
    )
    assert sent.returncode == 1 and slack.delivered(), sent.stderr
    assert json.loads(sent.stdout)["checks"]  # the JSON report, on stdout
    slack.default = SERVER_ERROR
    run_cli(
        out,
        env,
        "check",
        "--store",
        url,
        "--config",
        failing,
        "--at",
        at[2],
        "--notify",
        "--debug",
        "--format",
        "html",
        "--output",
        str(html),
    )
    out.add("html report", html.read_text(encoding="utf-8"))
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


# ---- text from data is escaped in chat and on the page ---------------------------------

# Session ids that would mention everyone, forge a link or run script if shown raw.
TRICKS = (
    "<!channel>",
    "<!here|here>",
    "<@U0ADMIN>",
    "<https://evil.example/login|Reset your password>",
    "<script>alert(1)</script><img src=x onerror=alert(2)>",
)


def test_session_ids_cannot_mention_link_or_script_in_slack_or_the_page(
    store: Store, server: ClickHouseHTTPServer, slack: SlackStandIn
) -> None:
    """Slack mention and link syntax and HTML in data reach Slack and the page escaped."""
    from alerts.notifiers import SlackNotifier
    from alerts.pipeline import process
    from watchdog.report.page import evaluate_page

    sc = Scenario()
    for i, trick in enumerate(TRICKS):  # the oldest cold starts: shown first in evidence
        sc.session(trick).starts(T0 + H + i * S)
    table = unique_table()
    sc.write(store, table)
    settings = settings_from_mapping(
        {
            "store": {"url": server.url(), "database": f"wd_{uuid.uuid4().hex[:10]}"},
            "source": {"table": table},
        },
        plugins=PLUGINS,
        env={},
    )
    report, page = evaluate_page(settings, AT, None)
    assert report.checks["recall_coverage"].evidence.sessions == TRICKS
    notifier = SlackNotifier(webhook_url=slack.webhook_url, backoff_base=0.01, timeout_s=2)
    process(store, settings, report, now=AT, notifiers={"slack": notifier})
    (message,) = slack.delivered()
    texts = list(strings(message.body))
    assert texts
    for trick in TRICKS:
        assert not any(trick in text for text in texts), trick
        assert trick not in page
    shown = "\n".join(texts)
    assert "&lt;!channel&gt;" in shown and "&lt;@U0ADMIN&gt;" in shown  # shown, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert "<img src=x" not in page


# ---- the grants a server needs -----------------------------------------------------------

_QUALIFIED = re.compile(
    r"\b(?:FROM|(?<!ARRAY\s)JOIN|INTO|DESCRIBE\s+TABLE|DESCRIBE|TABLE|DATABASE)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?([`\w]+(?:\.[`\w]+)?)",
    re.I,
)
_CTE = re.compile(r"\b(\w+)\s+AS\s*\(", re.I)


def needed_grants(queries: list[str], database: str) -> set[tuple[str, str]]:
    """(privilege, object) pairs the statements need; objects as `db.table` or `db.*`."""
    needed: set[tuple[str, str]] = set()
    for sql in queries:
        keyword = sql.lstrip("( \n").split(None, 1)[0].upper()
        ctes = {name.lower() for name in _CTE.findall(sql)}
        # The harness records the first 64 KiB of a body: a name cut at the end is no name.
        names = [m.group(1) for m in _QUALIFIED.finditer(sql) if m.end() < len(sql)]
        if keyword == "INSERT":  # the rest is the data
            names = names[:1]
        for name in names:
            name = name.replace("`", "")
            if "." not in name:
                if name.lower() in ctes or keyword == "CREATE":
                    if keyword == "CREATE" and name == database:
                        needed.add(("CREATE DATABASE", f"{database}.*"))
                    continue
                raise AssertionError(f"an unqualified table {name!r} in {sql[:200]!r}")
            if keyword in ("SELECT", "WITH"):
                needed.add(("SELECT", name))
            elif keyword == "INSERT":
                needed.add(("INSERT", name))
            elif keyword == "CREATE":
                needed.add(("CREATE TABLE", name))
            elif keyword in ("DESCRIBE", "DESC"):  # clickhouse-connect, before an insert
                needed.add(("SHOW COLUMNS", name))
            else:
                raise AssertionError(f"a statement beyond SELECT/INSERT/CREATE: {sql[:200]!r}")
    return needed


def granted(text: str) -> set[tuple[str, str]]:
    """(privilege, object) pairs of the `GRANT ... ON ... TO ...;` statements in `text`."""
    pairs = set()
    for privileges, target in re.findall(r"^GRANT\s+(.+?)\s+ON\s+(\S+)\s+TO\s+\w+;", text, re.M):
        for privilege in privileges.split(","):
            pairs.add((privilege.strip().upper(), target))
    return pairs


def covered(need: tuple[str, str], grants: set[tuple[str, str]]) -> bool:
    privilege, name = need
    database = name.split(".")[0]
    if privilege == "SHOW COLUMNS":  # ClickHouse implies it by any grant on the table
        return any(target in (name, f"{database}.*") for _, target in grants)
    return (privilege, name) in grants or (privilege, f"{database}.*") in grants


@pytest.mark.slow
def test_the_statements_sent_need_only_the_documented_grants(
    store: Store, slack: SlackStandIn, tmp_path: Path
) -> None:
    """Every statement `check`, `--notify`, `alerts`, `status` and `silence` send is covered.

    The daemon runs the same evaluation and alert pipeline as `check --notify` and reads
    the run log as `status` does: it needs no privilege these do not.
    """
    table = f"joelclaw_{uuid.uuid4().hex[:8]}.otel_events"
    world(lambda s: s).write(store, table)
    database = f"wd_{uuid.uuid4().hex[:10]}"
    cfg = tmp_path / "grants.toml"
    cfg.write_text(
        f'[store]\ndatabase = "{database}"\n[source]\ntable = "{table}"\n'
        # The default 4h schedule: the window of `check` is the schedule's (docs/spec.md s. 4).
        '[schedule]\ndelay = "0s"\nmax_catchup = 1\n'
        f'[alerts.slack]\nwebhook_url = "{slack.webhook_url}"\n',
        encoding="utf-8",
    )
    env = clean_env(tmp_path)
    out = Outputs()
    with ClickHouseHTTPServer(store.client) as chs:
        url = chs.url()
        for args in (
            ["check", "--at", AT_TEXT],
            ["check", "--at", AT_TEXT, "--notify"],
            ["alerts"],
            ["status"],
            ["silence", "add", "recall_coverage", "--for", "1h", "--reason", "grants"],
            ["silence", "list"],
        ):
            first = args[:2] if args[0] == "silence" else args[:1]
            done = run_cli(
                out, env, *first, "--store", url, "--config", str(cfg), *args[len(first) :]
            )
            assert done.returncode in (0, 1), done.stderr
        queries = [r.query for r in chs.requests if r.query]
    assert len(queries) > 20
    needed = needed_grants(queries, database)
    source_db = table.split(".")[0]
    assert ("SELECT", table) in needed and ("INSERT", f"{database}.outbox") in needed
    # Nothing but the source table, the watchdog's own database and the system tables.
    assert {name.split(".")[0] for _, name in needed} <= {source_db, database, "system"}
    assert {p for p, name in needed if name.split(".")[0] == source_db} == {"SELECT"}
    # The documented statements cover every need (reading the system tables included: the
    # optional block for servers with select_from_system_db_requires_grant)...
    documented = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    documented = documented.replace("joelclaw.otel_events", table).replace(
        " watchdog.*", f" {database}.*"
    )
    grants = granted(documented)
    assert {n for n in needed if not covered(n, grants)} == set()
    # ... and grant nothing more: least privilege.
    unused = {g for g in grants if not any(covered(n, {g}) for n in needed)}
    assert unused == set()
