"""Masking the receivers' secrets: in descriptions, error lines and third-party log records.

A receiver keeps (secret, masked) pairs and passes every line it shows
through `mask_secrets`; slack-sdk's logger gets a `SecretFilter`, since it
logs request URLs at debug level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit


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


# A part of a secret URL shorter than this is masked only as part of a longer one: it holds
# no secret worth the name, and masking every `v2` or `api` in a line would garble it.
MIN_PART = 4


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
    if parts.query:
        pairs.append((parts.query, "***"))
    pieces = [s for s in parts.path.split("/") if s]
    pieces += [value for _, value in parse_qsl(parts.query, keep_blank_values=True)]
    pieces += [p for p in parts.query.split("&") if p]  # raw `key=value` pairs
    pieces += [p.split("=", 1)[1] for p in parts.query.split("&") if "=" in p]  # raw values
    for piece in pieces:
        for form in {piece, unquote(piece), unquote_plus(piece)}:
            if len(form) >= MIN_PART:
                pairs.append((form, "***"))
    return pairs


def mask_secrets(text: str, secrets: Iterable[tuple[str, str]]) -> str:
    """`text` with every (secret, masked) pair replaced, longest secret first."""
    for secret, masked in sorted(secrets, key=lambda pair: -len(pair[0])):
        if secret:
            text = text.replace(secret, masked)
    return text


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
