"""Masking the receivers' secrets: in descriptions, error lines and third-party log records.

A receiver keeps (secret, masked) pairs and passes every line it shows
through `mask_secrets`; slack-sdk's logger gets a `SecretFilter`, since it
logs request URLs at debug level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlsplit


def mask_webhook(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/XYZ` -> `https://hooks.slack.com/services/***`."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if parts.port:
        host = f"{host}:{parts.port}"
    first = parts.path.strip("/").split("/")[0] if parts.path.strip("/") else ""
    return f"{parts.scheme}://{host}/{first + '/' if first else ''}***"


def mask_token(token: str) -> str:
    """`xoxb-123-abc` -> `xoxb-***`."""
    prefix = token.split("-", 1)[0] if "-" in token else ""
    return f"{prefix}-***" if prefix and len(prefix) <= 5 else "***"


def url_secrets(url: str) -> list[tuple[str, str]]:
    """The pairs that mask a secret URL: the whole of it, and its path and query alone."""
    parts = urlsplit(url)
    pairs = [(url, mask_webhook(url))]
    if parts.path.strip("/"):
        pairs.append((parts.path, "/***"))
    if parts.query:
        pairs.append((parts.query, "***"))
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
