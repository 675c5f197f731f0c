"""`memory-watchdog config check`: the file, the environment, and the source probed on the store.

The probe (`checks.probe`) runs in this process on the shared embedded
store; the command runs as a subprocess against a store of its own (the
test process keeps its embedded store open), for its output and exit codes:
0 all fine, 2 a config key or the environment at fault, 3 the store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks.probe import probe_source, server_words
from tests.builder import T0, M, Scenario, settings_for, unique_table
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.plugins import PLUGINS

# The tests run `memory-watchdog config check` as a process: left out of make test-fast.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "memory-watchdog"

SETUP = """
import sys
from tests.builder import M, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("s1").starts(T0).recalls(T0 + M)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""


@pytest.fixture(scope="module")
def table(store: Store) -> str:
    """A joelclaw table with one session in it."""
    name = unique_table()
    scenario = Scenario()
    scenario.session("s1").starts(T0).recalls(T0 + M)
    scenario.write(store, name)
    return name


def settings(table: str, **source: Any) -> Settings:
    config: dict[str, Any] = {"source": {"table": table, **source.pop("source", {})}}
    config.update(source)
    return settings_for(table, config)


# ---- the probe ------------------------------------------------------------------------------


def test_every_piece_of_a_sound_source_compiles(store: Store, table: str) -> None:
    """Each normalized column, the session filter and the whole source query compile: no problem."""
    probe = probe_source(
        store,
        settings(
            table,
            source={"session_filter": "source != ''", "columns": {"trigger": "'x'"}},
        ),
    )
    assert probe.problems == ()
    assert [f.label or f.key for f in probe.findings] == [
        "event_id",
        "ts",
        "session_id",
        "name",
        "latency_ms",
        "trigger (yours)",
        "result_count",
        "payload",
        "source.session_filter",
        "the source query",
    ]


def test_a_column_override_that_does_not_compile_names_its_key(store: Store, table: str) -> None:
    """An unknown identifier in [source.columns] is the user's key: config, with the server's words."""
    probe = probe_source(store, settings(table, source={"columns": {"trigger": "no_such_column"}}))
    [problem] = probe.problems
    assert problem.key == "source.columns.trigger" and problem.config
    assert problem.problem.startswith("does not compile: column not found:")
    assert "no_such_column" in problem.problem and "SETTINGS" not in problem.problem


def test_a_session_filter_that_does_not_compile_names_its_key(store: Store, table: str) -> None:
    """A syntax error in source.session_filter is reported on that key."""
    probe = probe_source(store, settings(table, source={"session_filter": "source = "}))
    [problem] = probe.problems
    assert problem.key == "source.session_filter" and problem.config
    # The token and what the parser expected, not the watchdog's query from that point on.
    assert problem.problem.startswith("does not compile: syntax error at ")
    assert "Expected" in problem.problem and "FROM" not in problem.problem


def test_a_custom_checks_session_filter_is_probed_under_its_own_key(
    store: Store, table: str
) -> None:
    """checks.custom[i].session_filter is compiled like the source's."""
    custom = {
        "id": "my_coverage",
        "kind": "coverage",
        "target": 0,
        "required": ["memory.recall.started"],
        "grace": "5m",
        "session_filter": "nonsense(",
    }
    probe = probe_source(store, settings(table, checks={"custom": [custom]}))
    [problem] = probe.problems
    assert problem.key == "checks.custom[0].session_filter" and problem.config


def test_a_ts_override_that_is_not_a_time_names_source_columns_ts(store: Store, table: str) -> None:
    """ts must compare with a time (the read range): a string column is the user's key at fault."""
    probe = probe_source(store, settings(table, source={"columns": {"ts": "metadata_json"}}))
    [problem] = probe.problems
    assert problem.key == "source.columns.ts" and problem.config
    assert "greaterOrEquals between String and DateTime64" in problem.problem


def test_a_missing_table_is_a_store_problem_naming_source_table(store: Store) -> None:
    """No such table: source.table, a store problem (exit 3 as for check)."""
    probe = probe_source(store, settings(unique_table()))
    [problem] = probe.problems
    assert problem.key == "source.table" and not problem.config
    assert probe.columns == 0


def test_columns_the_preset_reads_and_the_table_lacks_are_a_store_problem(
    store: Store, table: str
) -> None:
    """The otel_logs preset on a joelclaw table: the missing columns named, nothing compiled."""
    probe = probe_source(store, settings(table, source={"preset": "otel_logs"}))
    [problem] = probe.problems
    assert problem.key == "source.preset" and not problem.config
    assert "has no column" in problem.problem and "LogAttributes" in problem.problem


def test_server_words_drop_the_echoed_query() -> None:
    """ClickHouse echoes the query and our settings; the line keeps only what went wrong."""
    raw = (
        "column not found: Unknown expression identifier `x`. In scope SELECT x FROM t"
        " SETTINGS max_execution_time = '120'"
    )
    assert server_words(raw) == "column not found: Unknown expression identifier `x`."


# ---- the command ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with a joelclaw table, written by a subprocess."""
    url = f"chdb://{tmp_path_factory.mktemp('config-check') / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=Path(__file__).parents[1])
    return url


def run(config: str, *args: str, env: dict[str, str] | None = None, tmp: Path) -> Any:
    path = tmp / "watchdog.toml"
    path.write_text(config, encoding="utf-8")
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATCHDOG_", "SLACK_", "PD_"))
    }
    full_env.update({"XDG_DATA_HOME": str(tmp / "xdg"), **(env or {})})
    return subprocess.run(
        [str(BIN), "config", "check", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        check=False,
    )


RECEIVERS = """
[alerts.slack]
webhook_url = "${SLACK_WEBHOOK_URL}"

[alerts.pagerduty.oncall]
routing_key = "${PD_ROUTING_KEY}"

[[alerts.routes]]
severity = "critical"
receivers = ["pagerduty.oncall", "slack"]
"""
SECRETS = {
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/s3cr3t",
    "PD_ROUTING_KEY": "k" * 32,
}


def test_a_sound_config_and_store_exit_0_saying_what_was_checked(
    own_store: str, tmp_path: Path
) -> None:
    """Exit 0; stdout names the source, receivers masked, routes, and what compiled."""
    result = run(RECEIVERS, "--store", own_store, env=SECRETS, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert "source joelclaw.otel_events: preset joelclaw" in out
    assert "pagerduty.oncall (PagerDuty Events API v2" in out and "k" * 32 not in out
    assert "s3cr3t" not in out
    assert (
        "routes: critical, any check -> pagerduty.oncall, slack; otherwise -> pagerduty.oncall, slack"
        in out
    )
    assert "compiles (LIMIT 0): event_id, ts, session_id" in out
    assert out.rstrip().endswith("config check: OK")


def test_a_webhook_url_shows_what_the_file_writes_and_never_a_token_from_the_environment(
    tmp_path: Path,
) -> None:
    """A webhook's URL written in the file shows its host and path, each `${NAME}` as written
    and never what it gave; Slack's incoming webhook URL (itself the credential) stays masked,
    written in the file or not, in `[alerts.slack]` or in a webhook."""
    config = (
        '[alerts.webhook.team]\nurl = "https://alerts.example.com:8443/hooks/memory-watchdog"\n'
        '[alerts.webhook.ops]\nurl = "https://ops.example.com/services/${HOOK_TOKEN}"\n'
        '[alerts.webhook.chat]\nurl = "https://hooks.slack.com/services/T0/B0/s3cr3t"\n'
        '[alerts.slack]\nwebhook_url = "https://hooks.slack.com/services/T0/B0/s3cr3t"\n'
    )
    result = run(config, "--no-store", env={"HOOK_TOKEN": "T0/B0/t0ken-s3cr3t"}, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert (
        "webhook.team (Alertmanager webhook https://alerts.example.com:8443/hooks/memory-watchdog)"
        in out
    )
    assert (
        "webhook.ops (Alertmanager webhook https://ops.example.com/services/${HOOK_TOKEN})" in out
    )
    assert "webhook.chat (Alertmanager webhook https://hooks.slack.com/services/***)" in out
    assert "slack (incoming webhook https://hooks.slack.com/services/***)" in out
    assert "s3cr3t" not in out and "T0/B0" not in out


def test_a_key_that_does_not_compile_exits_2_naming_it(own_store: str, tmp_path: Path) -> None:
    """One line per problem on stderr, naming the key; exit 2."""
    config = "[source.columns]\ntrigger = \"JSONExtractString(metadata, 'trigger')\"\n"
    result = run(config, "--store", own_store, tmp=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("memory-watchdog: source.columns.trigger: does not compile: ")


def test_a_missing_table_exits_3(own_store: str, tmp_path: Path) -> None:
    """The table the source names is not in the store: exit 3, naming source.table."""
    result = run('[source]\ntable = "joelclaw.nope"\n', "--store", own_store, tmp=tmp_path)
    assert result.returncode == 3
    assert "source.table: table joelclaw.nope not found" in result.stderr


def test_an_unreachable_store_exits_3(tmp_path: Path) -> None:
    """Nothing listens at the store URL: exit 3, the password masked."""
    result = run("", "--store", "http://watchdog:pw0rd@127.0.0.1:9/default", tmp=tmp_path)
    assert result.returncode == 3
    assert "unreachable" in result.stderr and "pw0rd" not in result.stderr


def test_an_unknown_receiver_in_a_route_exits_2_before_anything_else(tmp_path: Path) -> None:
    """A route naming no configured receiver is a load error: one line, exit 2."""
    config = '[[alerts.routes]]\nseverity = "critical"\nreceivers = ["pagerduty.oncall"]\n'
    result = run(config, "--no-store", tmp=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"memory-watchdog: {tmp_path / 'watchdog.toml'}: alerts.routes[0].receivers:"
        " unknown receiver 'pagerduty.oncall' (configured: none; add one of"
        f" {PLUGINS.receiver_tables()})"
    )
    assert "[alerts.pagerduty.<name>]" in result.stderr


def test_unset_secrets_exit_2_naming_each_key_and_variable(tmp_path: Path) -> None:
    """Every secret referenced but unset is one line; the daemon would refuse to start."""
    result = run(RECEIVERS, "--no-store", tmp=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "memory-watchdog: alerts.pagerduty.oncall.routing_key: environment variable PD_ROUTING_KEY is not set",
        "memory-watchdog: alerts.slack.webhook_url: environment variable SLACK_WEBHOOK_URL is not set",
    ]


def test_no_store_checks_the_file_and_environment_only(tmp_path: Path) -> None:
    """--no-store: no store is opened (none exists here), exit 0 on a sound file."""
    result = run(RECEIVERS, "--no-store", env=SECRETS, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "store: not checked (--no-store)" in result.stdout
    assert not (tmp_path / "xdg").exists()  # nothing created


def test_a_broken_custom_template_exits_2(tmp_path: Path) -> None:
    """alerts.templates_dir with a template that does not render: exit 2, naming file and line."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "message.txt.j2").write_text("{{ alerts[0].valeu }}\n", encoding="utf-8")
    config = f'[alerts]\ntemplates_dir = "{templates}"\n'
    result = run(config, "--no-store", tmp=tmp_path)
    assert result.returncode == 2
    assert "alerts.templates_dir" in result.stderr and "message.txt.j2" in result.stderr


def test_control_characters_in_the_config_are_escaped_in_its_report(tmp_path: Path) -> None:
    """ESC, CR and BEL in `source.name` are shown escaped (`\\x1b`, `\\r`, `\\x07`), as `check`
    shows them, on stdout and on stderr: nothing reaches the terminal raw."""
    config = '[source]\nname = "agents\\u001b[31m red\\r\\u0007"\n' + RECEIVERS
    result = run(config, "--no-store", tmp=tmp_path)  # the secrets unset: lines on stderr too
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert not any(c in output for c in "\x1b\r\x07"), repr(output)
    assert "source agents\\x1b[31m red\\r\\x07: preset joelclaw" in result.stdout


# ---- every problem of the file at once ------------------------------------------------------

TWO_PROBLEMS = '[schedule]\nevrey = "1m"\ndelay = 5\n'


def test_every_problem_of_the_file_is_listed_each_on_its_own_line(tmp_path: Path) -> None:
    """An unknown key and a bad duration in one file: both named, one line each, exit 2
    (as promtool and amtool list every problem)."""
    result = run(TWO_PROBLEMS, "--no-store", tmp=tmp_path)
    assert result.returncode == 2
    where = tmp_path / "watchdog.toml"
    assert sorted(result.stderr.strip().splitlines()) == [
        f"memory-watchdog: {where}: schedule.delay: 5 is not a duration"
        " (e.g. 90s, 15m, 4h, 1d); write the unit, e.g. 5s",
        f"memory-watchdog: {where}: schedule.evrey: unknown key"
        " (accepted: every, cron, timezone, delay, max_catchup, misfire_grace)",
    ]
    assert result.stdout.strip() == "config check: FAILED (2 problem(s))"


def test_problems_of_custom_checks_are_listed_with_the_rest_of_the_file(tmp_path: Path) -> None:
    """A bad custom table stops no other problem from being named: each table's, each section's."""
    config = (
        '[window]\nlenght = "4h"\n\n'
        '[[checks.custom]]\nid = "a"\nkind = "coverage"\ntarget = 0\n\n'
        '[[checks.custom]]\nid = "b"\nkind = "share"\nevents = ["x"]\nfield = "f"\n'
        'value = "v"\ntarget = 40\n'
    )
    result = run(config, "--no-store", tmp=tmp_path)
    assert result.returncode == 2
    keys = [line.split(": ")[2] for line in result.stderr.strip().splitlines()]
    assert sorted(keys) == [
        "checks.custom[0].grace",
        "checks.custom[0].required",
        "checks.custom[1].target",
        "window.lenght",
    ]


def test_other_commands_name_the_first_problem_and_how_to_list_them_all(tmp_path: Path) -> None:
    """`check` keeps one line: the first problem, how many more, and the command listing them."""
    path = tmp_path / "watchdog.toml"
    path.write_text(TWO_PROBLEMS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    result = subprocess.run(
        [str(BIN), "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        check=False,
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.endswith(
        f"(and 1 more problem: `memory-watchdog config check --config {path}` lists every one)"
    )
