"""TLS to a ClickHouse server: `[store] ca_file`, `verify`, `client_cert`, `client_key`.

The server is the ClickHouse HTTP harness behind TLS, its certificates made by the `openssl`
command for each run (a CA, the server's for 127.0.0.1, a client's); the client is
clickhouse-connect's own, opened the one way every command opens a store (`open_configured`).
docs/operations.md#tls-to-a-clickhouse-server.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.chserver import ClickHouseHTTPServer
from tests.process_env import clean_env
from watchdog.core.errors import ConfigError, StoreError
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import open_configured
from watchdog.runner.plugins import PLUGINS

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
BIN = Path(sys.executable).parent / "memory-watchdog"


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(name: str, subject: str, extensions: str, cwd: Path) -> None:
    """`name.key` and `name.pem`, signed by `ca.pem` with the given v3 extensions."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions, encoding="utf-8")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=memory-watchdog test CA", cwd=where,
    )  # fmt: skip
    _signed(
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        where,
    )
    _signed(
        "client", "/CN=default", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n", where
    )
    return Pki(
        where / "ca.pem",
        where / "server.pem",
        where / "server.key",
        where / "client.pem",
        where / "client.key",
    )


def _server_context(pki: Pki, *, require_client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    return context


@pytest.fixture(scope="module")
def tls_server(embedded_client: Any, pki: Pki) -> Iterator[ClickHouseHTTPServer]:
    """The harness on HTTPS with the test CA's server certificate; user `default`, `secret`."""
    with ClickHouseHTTPServer(
        embedded_client, users={"default": "secret"}, tls=_server_context(pki)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def mutual_server(embedded_client: Any, pki: Pki) -> Iterator[ClickHouseHTTPServer]:
    """The harness on HTTPS that accepts only clients with a certificate of the test CA."""
    with ClickHouseHTTPServer(
        embedded_client, tls=_server_context(pki, require_client_cert=True)
    ) as server:
        yield server


def _settings(url: str, **store: Any) -> Settings:
    return settings_from_mapping({"store": {"url": url, **store}}, plugins=PLUGINS, env={})


def _answer(settings: Settings) -> int:
    with open_configured(settings.store) as store:
        return int(store.query("SELECT 41 + 1").rows[0][0])


def test_an_https_server_with_a_private_ca_is_refused_without_its_ca_file(
    tls_server: ClickHouseHTTPServer,
) -> None:
    """Without `ca_file` the server's certificate is checked against the system's CAs: refused."""
    with pytest.raises(StoreError) as raised:
        _answer(_settings(tls_server.url()))
    assert "TLS: the server's certificate could not be verified (certificate verify failed" in (
        str(raised.value)
    )
    assert "set store.ca_file" in str(raised.value)
    assert "secret" not in str(raised.value)


def test_an_https_server_is_reached_with_its_ca_file(
    tls_server: ClickHouseHTTPServer, pki: Pki
) -> None:
    """`store.ca_file` naming the CA that signed the server's certificate: queries are answered."""
    assert tls_server.url().startswith("https://")
    assert _answer(_settings(tls_server.url(), ca_file=str(pki.ca))) == 42


def test_verify_false_reaches_a_server_no_ca_vouches_for(tls_server: ClickHouseHTTPServer) -> None:
    """`store.verify = false` skips the certificate check (encrypted, not authenticated)."""
    assert _answer(_settings(tls_server.url(), verify=False)) == 42


def test_a_server_requiring_a_client_certificate_takes_the_configured_one(
    mutual_server: ClickHouseHTTPServer, pki: Pki
) -> None:
    """`client_cert` and `client_key` are presented; without them the handshake fails."""
    with pytest.raises(StoreError) as raised:
        _answer(_settings(mutual_server.url(), ca_file=str(pki.ca)))
    assert "TLS handshake failed" in str(raised.value) and "store.client_cert" in str(raised.value)
    configured = _settings(
        mutual_server.url(),
        ca_file=str(pki.ca),
        client_cert=str(pki.client_cert),
        client_key=str(pki.client_key),
    )
    assert _answer(configured) == 42


def test_a_missing_ca_file_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    """`store.ca_file` naming no file fails at load, naming the key and the path."""
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError) as raised:
        _settings("https://clickhouse.example:8443/default", ca_file=str(missing))
    assert str(raised.value) == f"store.ca_file: '{missing}': no such file (a PEM file's path)"


def test_a_client_key_without_its_certificate_is_a_config_error(pki: Pki) -> None:
    """`store.client_key` alone is refused: the key is for a certificate."""
    with pytest.raises(ConfigError) as raised:
        _settings("https://clickhouse.example:8443/default", client_key=str(pki.client_key))
    assert "client_key needs client_cert" in str(raised.value)


def test_tls_keys_for_a_plain_http_server_are_a_config_error(pki: Pki) -> None:
    """TLS keys with an http:// store URL are refused: they would be ignored, the traffic clear."""
    with pytest.raises(ConfigError) as raised:
        _settings("http://default:pw@clickhouse.example:8123/default", ca_file=str(pki.ca))
    assert str(raised.value).startswith("store.ca_file: TLS applies to an https:// server")
    assert "pw@" not in str(raised.value)


@pytest.mark.slow
def test_the_cli_says_a_missing_ca_file_in_one_line_and_exits_2(tmp_path: Path) -> None:
    """`check` with a config whose `store.ca_file` is missing: one line on stderr, exit 2."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        '[store]\nurl = "https://clickhouse.example:8443/default"\n'
        f'ca_file = "{tmp_path / "ca.pem"}"\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [str(BIN), "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"memory-watchdog: {config}: store.ca_file: '{tmp_path / 'ca.pem'}': no such file"
        " (a PEM file's path)"
    ]


def test_a_cli_process_over_tls_without_verify_logs_only_json_lines(
    tls_server: ClickHouseHTTPServer, tmp_path: Path
) -> None:
    """`check --log-format json` on an https:// store with `verify = false`: it reaches the
    server (the source table is missing: exit 3), and every stderr line is a JSON record (no
    urllib3 warning text)."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        f'[store]\nurl = "{tls_server.url()}"\nverify = false\n'
        '[source]\ntable = "nowhere.no_events"\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [str(BIN), "check", "--config", str(config), "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        check=False,
    )
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert done.returncode == 3, done.stderr
    assert records and all(r["level"] and r["time"].endswith("Z") for r in records)
    assert "nowhere.no_events" in records[-1]["message"], done.stderr
    assert "secret" not in done.stderr
