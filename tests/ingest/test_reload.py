"""SIGHUP and the receiver: `[ingest]` takes a restart, and a config file being rewritten is never taken."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.settings.load import load_settings
from watchdog.daemon.reload import Reloads, settled
from watchdog.runner.plugins import PLUGINS

CONFIG = """
[alerts.stdout]
enabled = true

[ingest]
listen = "127.0.0.1:4318"
token = "old-token-0123"
"""


def test_a_reload_that_changes_ingest_keeps_it_and_says_it_takes_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new token or new limits in [ingest] on SIGHUP: the running receiver keeps its own, and
    the log says [ingest] changed and takes a restart (it used to say "reloaded" and keep them)."""
    env = {"HOME": str(tmp_path)}
    running = settings_from_mapping(
        {"ingest": {"token": "old-token-0123"}}, plugins=PLUGINS, env=env
    )
    loaded = settings_from_mapping(
        {"ingest": {"token": "new-token-4567", "max_body": "1MiB"}, "window": {"lookback": "36h"}},
        plugins=PLUGINS,
        env=env,
    )
    with caplog.at_level(logging.INFO, logger="watchdog.daemon.reload"):
        pending = Reloads(lambda: loaded, own_notifiers=False).load(running)
    assert pending is not None
    assert pending.settings.ingest == running.ingest
    assert pending.settings.window == loaded.window  # the rest is taken
    warning = next(r.message for r in caplog.records if r.levelno == logging.WARNING)
    assert "ingest changed" in warning and "restart" in warning
    assert "new-token" not in caplog.text and "old-token" not in caplog.text


def _reloads(path: Path, rewrite: str | None = None) -> Reloads:
    """Reloads of `path` as the daemon does them; `rewrite` is written between the first reads."""

    def settle() -> None:
        if rewrite is not None:
            path.write_text(rewrite, encoding="utf-8")

    def loader() -> Settings:
        return load_settings(str(path), plugins=PLUGINS, env={"HOME": str(path.parent)})

    return Reloads(settled(loader, str(path), settle=settle), own_notifiers=True)


def test_a_config_file_being_rewritten_is_never_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGHUP while the file is truncated (empty) or is being written (it changes between two
    reads): the running config stays, and the log says why; once the file is still, it is taken."""
    path = tmp_path / "watchdog.toml"
    path.write_text(CONFIG, encoding="utf-8")
    running = load_settings(str(path), plugins=PLUGINS, env={"HOME": str(tmp_path)})
    path.write_text("", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="watchdog.daemon.reload"):
        assert _reloads(path).load(running) is None
        assert "empty" in caplog.text and "the running one stays" in caplog.text
        caplog.clear()
        path.write_text(CONFIG[: len(CONFIG) // 2], encoding="utf-8")  # half written
        assert _reloads(path, rewrite=CONFIG).load(running) is None
        assert "changed while it was read" in caplog.text
        pending = _reloads(path).load(running)
    assert pending is not None and pending.notifiers is not None
    assert set(pending.notifiers) == {"stdout"}  # the receivers were not dropped
