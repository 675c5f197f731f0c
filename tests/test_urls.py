"""Store URLs: masked from the parsed URL, whatever the password holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from watchdog.core.urls import mask_url, mask_urls_in, parse_store_url

BIN = Path(sys.executable).parent / "memory-watchdog"
# Every character with a meaning in a URL, and a few more a password generator likes.
SPECIAL = list("@:/?#[]!$&'()*+,;=% \"<>\\^`{|}~")


@pytest.mark.parametrize("char", SPECIAL)
def test_a_password_with_any_special_character_is_masked_whole(char: str) -> None:
    """`p<c>ssCANARY<c>x` as a password never shows a character of it, raw or encoded."""
    password = f"p{char}ssCANARY{char}x"
    for written in (password, quote(password, safe="")):
        url = f"http://watchdog:{written}@127.0.0.1:9/db"
        assert mask_url(url) == "http://watchdog:***@127.0.0.1:9/db"
        if " " not in written:  # in free text a URL ends at whitespace
            assert "CANARY" not in mask_urls_in(f"store {url} unreachable")
        parsed = parse_store_url(url)
        assert (parsed.username, parsed.host, parsed.port, parsed.database) == (
            "watchdog",
            "127.0.0.1",
            9,
            "db",
        )
        if written != password or char not in "%":
            assert parsed.password == password


@pytest.mark.parametrize("char", [c for c in SPECIAL if c not in ":@/?#"])
def test_a_user_name_with_special_characters_keeps_its_name(char: str) -> None:
    """A user name holding URL-special characters (percent-encoded) is decoded, never the password."""
    user = f"wat{char}chdog"
    url = f"https://{quote(user, safe='')}:s3cr3tCANARY@clickhouse.internal:8443/default"
    assert parse_store_url(url).username == user
    assert "CANARY" not in mask_url(url)


@pytest.mark.slow
def test_the_cli_never_prints_a_password_with_an_at_sign(tmp_path: Path) -> None:
    """`check` and `status` on an unreachable server show the URL masked, @ in the password too."""
    url = "http://watchdog:p@ssCANARY@127.0.0.1:9/db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = str(tmp_path)
    for command in (["check"], ["status"]):
        result = subprocess.run(
            [str(BIN), *command, "--store", url],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert result.returncode == 3, result.stderr
        assert "CANARY" not in result.stdout + result.stderr
        assert "http://watchdog:***@127.0.0.1:9/db" in result.stderr
