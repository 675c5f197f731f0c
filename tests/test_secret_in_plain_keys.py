"""A secret's value written into a plain key is masked there when the config loads (issue 45
point 4: `source.name = "agents-${X}"` beside `bearer_token = "${X}"` put the token in the
report, `config check`, chat and every line naming the source)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.alerts.test_unreadable_rows import SETUP
from watchdog.core.settings import settings_from_mapping
from watchdog.core.settings.values import secret_value
from watchdog.runner.plugins import PLUGINS

CANARY = "s3cr3tCANARY-7f2a"
HOOK = {"url": "http://127.0.0.1:9/hook", "bearer_token": "${X}"}


def test_a_secret_from_the_environment_in_a_plain_key_is_masked() -> None:
    """The variable a bearer token reads, used in the source's name: `agents-***`."""
    config = {"source": {"name": "agents-${X}"}, "alerts": {"webhook": {"ops": HOOK}}}
    settings = settings_from_mapping(config, plugins=PLUGINS, env={"X": CANARY})
    assert settings.source.display_name == "agents-***"
    hook = settings.alerts.receivers()["webhook.ops"]
    assert (
        secret_value(getattr(hook, "bearer_token", None)) == CANARY
    )  # the secret itself is kept, to be sent


def test_a_secret_written_in_the_file_and_in_a_plain_key_is_masked() -> None:
    """A token written in the file is masked where a plain key repeats it."""
    hook = {**HOOK, "bearer_token": CANARY}
    config = {"source": {"name": f"agents-{CANARY}"}, "alerts": {"webhook": {"ops": hook}}}
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    assert settings.source.display_name == "agents-***"


def test_a_store_password_in_a_plain_key_is_masked() -> None:
    """The store URL's password, repeated in the report's base URL, shows there as `***`."""
    config = {
        "store": {"url": "http://watchdog:${X}@127.0.0.1:8123/"},
        "report": {"base_url": "https://reports.example/${X}/"},
    }
    settings = settings_from_mapping(config, plugins=PLUGINS, env={"X": CANARY})
    assert settings.report.base_url == "https://reports.example/***/"
    assert CANARY in settings.store.url  # the store still gets it


def test_a_short_secret_does_not_garble_plain_keys() -> None:
    """A secret shorter than 4 characters is not hunted for in other values."""
    hook = {**HOOK, "bearer_token": "ab"}
    config = {"source": {"name": "agents-lab"}, "alerts": {"webhook": {"ops": hook}}}
    settings = settings_from_mapping(config, plugins=PLUGINS, env={})
    assert settings.source.display_name == "agents-lab"


ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent / "memory-watchdog"


@pytest.mark.slow
def test_a_secret_in_the_source_name_shows_in_no_output(tmp_path: Path) -> None:
    """`config check`, `check` (text, JSON, `--notify` with a chat receiver), `alerts` and
    `status`: the token never shows, on stdout, stderr or in the message sent."""
    url = f"chdb://{tmp_path / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=ROOT)
    chat = tmp_path / "chat.txt"
    config = tmp_path / "watchdog.toml"
    config.write_text(
        '[source]\nname = "agents-${X}"\n[alerts]\ndelivery_timeout = "2s"\n'
        f'[alerts.stdout]\nfile = "{chat}"\n'
        '[alerts.webhook.ops]\nurl = "http://127.0.0.1:9/hook"\nbearer_token = "${X}"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env.update(X=CANARY, XDG_DATA_HOME=str(tmp_path / "xdg"))
    common = ["--store", url, "--config", str(config)]
    said = []
    for args in (
        ["config", "check", "--config", str(config)],
        ["check", *common, "--at", "2026-11-28T06:00:00Z"],
        ["check", *common, "--at", "2026-11-28T06:00:00Z", "--format", "json"],
        ["check", *common, "--at", "2026-11-28T06:00:00Z", "--notify", "--debug"],
        ["alerts", *common],
        ["status", *common],
    ):
        done = subprocess.run(
            [str(BIN), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )
        said.append(done.stdout + done.stderr)
    assert "agents-***" in said[1], said[1]
    assert "agents-***" in chat.read_text(encoding="utf-8")
    assert [CANARY in text for text in [*said, chat.read_text(encoding="utf-8")]] == [False] * 7
