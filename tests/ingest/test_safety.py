"""Safe by default: loopback unless a token is set, the token compared in constant time, 503 while
the store is unusable."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ingest.conftest import Receiving, ingest_settings
from tests.ingest.processes import BIN, REPO, clean_env, free_port
from tests.ingest.test_receiver import logs_request, post
from watchdog.core.errors import ConfigError
from watchdog.core.settings import settings_from_mapping
from watchdog.daemon.ingest import receiver as receiver_module
from watchdog.daemon.ingest.service import Ingest
from watchdog.runner.plugins import PLUGINS

# The tests start `memory-watchdog daemon --otlp` processes: left out of make test-fast.
pytestmark = pytest.mark.slow


def daemon(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`memory-watchdog daemon ARGS` in its own data directory; it must stop at its own error."""
    return subprocess.run(
        [str(BIN), "daemon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(tmp_path / "xdg"), **env},
        cwd=REPO,
        check=False,
    )


def test_otlp_flag_off_loopback_without_token_is_refused(tmp_path: Path) -> None:
    """`daemon --otlp 0.0.0.0:PORT` with no [ingest] token: exit 2, one line naming ingest.token."""
    done = daemon(tmp_path, "--otlp", f"0.0.0.0:{free_port()}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "--otlp" in line and "not loopback" in line and "ingest.token" in line


def test_config_listen_off_loopback_without_token_is_a_config_error(tmp_path: Path) -> None:
    """`[ingest] listen` on a non-loopback address with no token does not validate (exit 2)."""
    config = tmp_path / "watchdog.toml"
    config.write_text(f'[ingest]\nlisten = "0.0.0.0:{free_port()}"\n', encoding="utf-8")
    done = daemon(tmp_path, "--config", str(config))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ingest" in line and "not loopback" in line and "token" in line


def test_token_from_an_unset_variable_is_named_and_never_bound(tmp_path: Path) -> None:
    """`token = "${OTLP_TOKEN}"` with OTLP_TOKEN unset: exit 2 naming the variable, nothing bound."""
    port = free_port()
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[ingest]\nlisten = "127.0.0.1:{port}"\ntoken = "${{OTLP_TOKEN}}"\n', encoding="utf-8"
    )
    done = daemon(tmp_path, "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "OTLP_TOKEN" in done.stderr and "not set" in done.stderr
    assert not (tmp_path / "xdg" / "memory-watchdog" / "ingest").exists()


def test_non_loopback_listen_with_a_token_validates(tmp_path: Path) -> None:
    """A token makes any address acceptable; its value stays out of the settings' text."""
    settings = settings_from_mapping(
        {"ingest": {"listen": "0.0.0.0:4318", "token": "${OTLP_TOKEN}"}},
        plugins=PLUGINS,
        env={"HOME": str(tmp_path), "OTLP_TOKEN": "tok-1234567890"},
    )
    assert settings.ingest.token_value == "tok-1234567890"
    assert "tok-1234567890" not in repr(settings) + str(settings.model_dump())
    with pytest.raises(ConfigError):
        settings_from_mapping(
            {"ingest": {"listen": "10.0.0.7:4318"}}, plugins=PLUGINS, env={"HOME": str(tmp_path)}
        )


def test_bearer_token_is_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch, receiving: Callable[..., Receiving]
) -> None:
    """Every token a client presents, right or wrong, of any length, goes through hmac.compare_digest."""
    compared: list[tuple[bytes, bytes]] = []
    real = receiver_module.hmac.compare_digest

    def spy(given: bytes, token: bytes) -> bool:
        compared.append((given, token))
        return real(given, token)

    monkeypatch.setattr(receiver_module.hmac, "compare_digest", spy)
    receiver = receiving(token="s3cret-token")
    for given, status in (("s3cret-token", 200), ("s3cret-tokeN", 401), ("s", 401), ("", 401)):
        answer = post(receiver.endpoint, logs_request(1), Authorization=f"Bearer {given}")
        assert answer.status == status
    assert compared == [
        (b"s3cret-token", b"s3cret-token"),
        (b"s3cret-tokeN", b"s3cret-token"),
        (b"s", b"s3cret-token"),
        (b"", b"s3cret-token"),
    ]


def test_unusable_store_is_503_with_retry_after(tmp_path: Path) -> None:
    """While the store cannot be used and the queue is full: 503 with Retry-After, nothing lost."""
    settings = ingest_settings(tmp_path, max_queued=100)
    nobody = f"http://127.0.0.1:{free_port()}"  # a ClickHouse server that is not there
    settings = settings.with_store_url(nobody)
    ingest = Ingest(settings)
    server = ingest.start("127.0.0.1:0")
    try:
        assert server.http is not None
        host, port = server.http
        endpoint = f"http://{host!s}:{port}"
        assert post(endpoint, logs_request(3)).status == 200  # durable in the spool
        refused = post(endpoint, logs_request(4))
        assert refused.status == 503
        assert refused.getheader("Retry-After") == "1"
        assert ingest.spool.queued_bytes > 0  # the accepted request waits for the store
    finally:
        ingest.stop()


@pytest.mark.parametrize(
    ("token", "env"),
    [
        ("${OTLP_TOKEN}", {"OTLP_TOKEN": ""}),  # an empty line in a systemd EnvironmentFile
        ("${OTLP_TOKEN:-}", {}),
        ("", {}),
        (" \t ", {}),
    ],
    ids=["empty-variable", "empty-default", "empty-string", "whitespace"],
)
def test_an_empty_token_is_no_token(tmp_path: Path, token: str, env: dict[str, str]) -> None:
    """An empty or whitespace `[ingest] token` opens nothing: the daemon and `config check` exit 2
    naming ingest.token, and nothing is bound."""
    port = free_port()
    config = tmp_path / "watchdog.toml"
    config.write_text(f'[ingest]\nlisten = "0.0.0.0:{port}"\ntoken = "{token}"\n', encoding="utf-8")
    done = daemon(tmp_path, "--config", str(config), **env)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ingest.token" in line and "empty" in line
    checked = subprocess.run(
        [str(BIN), "config", "check", "--no-store", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(tmp_path / "xdg"), **env},
        cwd=REPO,
        check=False,
    )
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "ingest.token" in checked.stderr and "empty" in checked.stderr
    assert not (tmp_path / "xdg" / "memory-watchdog" / "ingest").exists()


def test_otlp_grpc_off_loopback_without_token_is_refused(tmp_path: Path) -> None:
    """`daemon --otlp-grpc 0.0.0.0:PORT`, or `[ingest] grpc_listen` off loopback, with no token:
    exit 2, one line naming ingest.token; nothing bound."""
    done = daemon(tmp_path, "--otlp-grpc", f"0.0.0.0:{free_port()}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "--otlp-grpc" in line and "not loopback" in line and "ingest.token" in line
    config = tmp_path / "watchdog.toml"
    config.write_text(f'[ingest]\ngrpc_listen = "0.0.0.0:{free_port()}"\n', encoding="utf-8")
    done = daemon(tmp_path, "--config", str(config))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ingest" in line and "not loopback" in line and "token" in line
