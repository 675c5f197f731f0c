"""Store URLs: parsed once, and shown only with the password masked.

`chdb:///abs/path` and `chdb://memory` name the embedded engine;
`http(s)://user:password@host:8123/database` a ClickHouse server
(docs/configuration.md#where-things-come-from). The mask is computed from the parsed URL (the
userinfo ends at the *last* `@` before the host), so a password holding `@`, `:` or `/` is
never half shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

MEMORY = "memory"
SCHEMES = "chdb:///path, chdb://memory, http(s)://user:password@host:8123/database"


class StoreURLError(ValueError):
    """A string that is not a store URL; `str()` says why (no password in it)."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL; `masked` is the only form ever shown."""

    raw: str = field(repr=False)
    kind: str  # "chdb" or "http"
    path: str | None = None  # chdb: absolute directory, or "memory"
    host: str | None = None
    port: int | None = None
    secure: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None

    @property
    def masked(self) -> str:
        return mask_url(self.raw)

    @property
    def embedded(self) -> bool:
        return self.kind == "chdb"


@dataclass(frozen=True)
class _Parts:
    scheme: str
    userinfo: str | None  # everything before the last `@` of the authority, raw
    rest: SplitResult  # scheme://host:port/path, without the userinfo


def _split(url: str) -> _Parts | None:
    """Split off the userinfo at the last `@`: a password may hold `@ : / ? #` unencoded."""
    scheme, sep, remainder = url.partition("://")
    if not sep or not scheme:
        return None
    at = remainder.rfind("@")
    userinfo = remainder[:at] if at >= 0 else None
    try:
        rest = urlsplit(f"{scheme}://{remainder[at + 1 :]}")
    except ValueError:
        return None
    return _Parts(scheme.lower(), userinfo, rest)


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***`, whatever characters the password holds."""
    parts = _split(url.strip())
    if parts is None or parts.userinfo is None or ":" not in parts.userinfo:
        return url
    user = parts.userinfo.partition(":")[0]
    return f"{parts.scheme}://{user}:***@{parts.rest.geturl().partition('://')[2]}"


_URL_IN_TEXT = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)


def mask_urls_in(text: str) -> str:
    """Every URL inside free text (a command line, an error message) masked."""
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)


def parse_store_url(url: str) -> StoreURL:
    """Parse `chdb:///abs/path`, `chdb://memory` or `http(s)://user:pass@host:port/db`."""
    if url.startswith("chdb://"):
        rest = url[len("chdb://") :]
        if rest == MEMORY:
            return StoreURL(raw=url, kind="chdb", path=MEMORY)
        if not rest.startswith("/"):
            raise StoreURLError("an embedded store URL is chdb:///absolute/path or chdb://memory")
        return StoreURL(raw=url, kind="chdb", path=rest.rstrip("/") or "/")
    parts = _split(url)
    if parts is None or parts.scheme not in ("http", "https") or not parts.rest.hostname:
        raise StoreURLError(f"not a store URL (accepted: {SCHEMES})")
    try:
        port = parts.rest.port
    except ValueError:
        raise StoreURLError("the port is not a number from 1 to 65535") from None
    user, colon, password = (parts.userinfo or "").partition(":")
    return StoreURL(
        raw=url,
        kind="http",
        host=parts.rest.hostname,
        port=port or (8443 if parts.scheme == "https" else 8123),
        secure=parts.scheme == "https",
        username=unquote(user) or None,
        password=unquote(password) if colon else None,
        database=parts.rest.path.strip("/") or None,
    )
