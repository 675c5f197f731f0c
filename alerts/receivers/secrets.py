"""Masking the receivers' secrets: in descriptions, error lines and third-party log records.

A receiver keeps (secret, masked) pairs and passes every line it shows through `mask_secrets`;
slack-sdk's logger gets a `SecretFilter`, since it logs request URLs at debug level. A secret
URL the config file wrote shows what the file says (`secret_url`). How each secret is shown:
docs/alerts.md#receivers-and-routes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

from watchdog.core.settings.values import MIN_PART, WrittenPart, mask_secrets


def mask_webhook(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/XYZ` -> `https://hooks.slack.com/services/***`.

    The first path segment is shown only when more follow (it names the route, not
    the secret); a URL that cannot be parsed shows nothing of itself.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "***"
    if port:
        host = f"{host}:{port}"
    segments = [s for s in parts.path.split("/") if s]
    first = f"{segments[0]}/" if len(segments) > 1 else ""
    return f"{parts.scheme}://{host}/{first}***"


def mask_token(token: str) -> str:
    """`xoxb-123-abc` -> `xoxb-***`."""
    prefix = token.split("-", 1)[0] if "-" in token else ""
    return f"{prefix}-***" if prefix and len(prefix) <= 5 else "***"


def url_secrets(url: str) -> list[tuple[str, str]]:
    """The pairs that mask a secret URL wherever a part of it may show.

    The whole URL, its path and its query, and each path segment and query value on
    its own, raw and percent-decoded: a consumer answering "no such hook <segment>"
    or echoing a query value must not put the secret in an error line or the outbox.
    """
    pairs = [(url, mask_webhook(url))]
    try:
        parts = urlsplit(url)
    except ValueError:
        return pairs
    if parts.path.strip("/"):
        pairs.append((parts.path, "/***"))
    pieces = [s for s in parts.path.split("/") if s]
    pairs += _masked_pieces(pieces)
    return pairs + _query_secrets(parts.query, parts.fragment)


def _masked_pieces(pieces: Iterable[str]) -> list[tuple[str, str]]:
    """Each piece masked, raw and percent-decoded, when it is MIN_PART long or more."""
    return [
        (form, "***")
        for piece in pieces
        for form in {piece, unquote(piece), unquote_plus(piece)}
        if len(form) >= MIN_PART
    ]


def _query_secrets(query: str, fragment: str) -> list[tuple[str, str]]:
    """The pairs masking a query (whole, each `key=value` and each value) and a fragment."""
    pairs = [(whole, "***") for whole in (query, fragment) if whole]
    pieces = [value for _, value in parse_qsl(query, keep_blank_values=True)]
    pieces += [p for p in query.split("&") if p]  # raw `key=value` pairs
    pieces += [p.split("=", 1)[1] for p in query.split("&") if "=" in p]  # raw values
    return pairs + _masked_pieces([*pieces, fragment])


# Services whose webhook URL is itself the credential (the token is the path): such a URL is
# masked as a secret however the config wrote it. Each host, or any host under it.
CREDENTIAL_HOSTS = (
    "hooks.slack.com",  # Slack's incoming webhooks: /services/T.../B.../<secret>
    "discord.com",  # /api/webhooks/<id>/<token>
    "discordapp.com",
    "webhook.office.com",  # Microsoft Teams' incoming webhooks
    "outlook.office.com",
    "api.telegram.org",  # /bot<token>/...
    "hooks.zapier.com",
    "maker.ifttt.com",  # /trigger/<event>/with/key/<key>
)


def credential_url(url: str) -> bool:
    """Whether `url` is one of CREDENTIAL_HOSTS' (a URL that cannot be parsed counts as one)."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return True
    return any(host == known or host.endswith(f".{known}") for known in CREDENTIAL_HOSTS)


# Where a secret in a URL may be cut into the pieces a consumer or a client echoes on its own.
_SEPARATORS = "/?&=#@:"
# A reference's place in the written text while it is split: no URL-special character in it.
_PLACE = re.compile(r"\x00(\d+)\x00")


@dataclass(frozen=True)
class SecretURL:
    """A secret URL as it may be shown, and the (secret, masked) pairs of what may not show."""

    shown: str
    secrets: tuple[tuple[str, str], ...]


def secret_url(url: str, written: Sequence[WrittenPart] | None = None) -> SecretURL:
    """How a receiver shows a secret URL: what the config file wrote, never what came from
    the environment.

    Written in the file, its scheme, host, port and path show as written, each `${NAME}` as
    that reference; the password of its userinfo (the user when there is no password), each
    query value and a fragment show as `***`. Masked whole (`mask_webhook`, `url_secrets`):
    a URL whose writing is not known (`written` None), one that came whole from the
    environment (`url = "${WEBHOOK_URL}"`), and one of CREDENTIAL_HOSTS'.
    """
    from_env = [text for text, reference in written or () if reference is not None]
    literal = "".join(text for text, reference in written or () if reference is None)
    if written is None or not literal.strip() or credential_url(url):
        return SecretURL(mask_webhook(url), tuple(url_secrets(url)))
    shown = _shown_as_written(written)
    pairs = [(url, shown)]
    secret = list(from_env)  # what the environment gave
    userinfo, rest = _userinfo(url)
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        pairs.append((userinfo, f"{user}:***" if colon else "***"))
        secret.append(password if colon else user)
    pairs += _masked_pieces(piece for text in secret for piece in _pieces(text))
    try:
        parts = urlsplit(rest)
    except ValueError:
        return SecretURL(shown, (*pairs, *url_secrets(url)))
    return SecretURL(shown, (*pairs, *_query_secrets(parts.query, parts.fragment)))


def _pieces(secret: str) -> set[str]:
    """The secret, and its pieces between separators: cut at each one, and at all of them
    (http.client names `p@ss` of `user:p@ss/word@host` as a port)."""
    found = {secret, *re.split(f"[{re.escape(_SEPARATORS)}]", secret)}
    for separator in _SEPARATORS:
        found.update(secret.split(separator))
    return found


def _userinfo(url: str) -> tuple[str | None, str]:
    """The userinfo of `url`, and the URL without it.

    A password may hold `@ / ? #` unencoded, as a store URL's may: when the authority (up to
    the first `/ ? #`) holds a `:` or an `@`, the userinfo ends at the URL's last `@`, so that
    no part of such a password shows (a `@` further on, in a path or query, then masks more).
    """
    scheme, sep, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    at = rest.rfind("@") if sep and (":" in authority or "@" in authority) else -1
    if at < 0:
        return None, url
    return rest[:at], f"{scheme}://{rest[at + 1 :]}"


def _shown_as_written(written: Sequence[WrittenPart]) -> str:
    """The URL as written, the password, query values and fragment masked.

    Each reference holds a place of its own while the URL is split, so that what it gave
    never shows and the `:` of a `${NAME:-***}` is no password's.
    """
    references = [reference for _, reference in written if reference is not None]
    places = iter(range(len(references)))
    text = "".join(
        text.replace("\x00", "") if ref is None else f"\x00{next(places)}\x00"
        for text, ref in written
    )
    userinfo, rest = _userinfo(text)
    scheme, sep, rest = rest.partition("://")
    if not sep:
        scheme, rest = "", text
    cut = min([i for i in (rest.find("?"), rest.find("#")) if i >= 0] or [len(rest)])
    head, tail = rest[:cut], rest[cut:]
    query, hashed, _ = tail.partition("#")
    if query:
        pairs = query[1:].split("&")
        query = "?" + "&".join(f"{p.split('=', 1)[0]}=***" if "=" in p else "***" for p in pairs)
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        head = f"{user}:***@{head}" if colon else f"***@{head}"
    shown = f"{scheme}{sep}{head}{query}{'#***' if hashed else ''}"
    return _PLACE.sub(lambda match: references[int(match.group(1))], shown)


class SecretFilter(logging.Filter):
    """Masks secrets in every record of the logger it is attached to (slack-sdk's)."""

    def __init__(self, secrets: list[tuple[str, str]]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_secrets(record.getMessage(), self.secrets)
        record.args = None
        return True


def secret_filter(logger: logging.Logger) -> SecretFilter:
    """The logger's SecretFilter, added on first use; loggers are shared, so secrets accumulate."""
    for existing in logger.filters:
        if isinstance(existing, SecretFilter):
            return existing
    added = SecretFilter([])
    logger.addFilter(added)
    return added
