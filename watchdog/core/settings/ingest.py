"""`[ingest]`: the daemon as an OTLP receiver (`daemon --otlp`, `--otlp-grpc`; docs/start-without-clickhouse.md).

The receiver stores what it accepts as the OpenTelemetry Collector's
ClickHouse exporter does, in `logs_table` and `traces_table` of the store.
OTLP/HTTP binds `listen`, OTLP/gRPC `grpc_listen`, loopback unless told
otherwise; any other address needs `token` (clients send `Authorization:
Bearer <token>`, a header or gRPC metadata). The limits bound one request
(`max_body`, `max_records`) and what is accepted but not yet loaded into the
store (`max_queued`): beyond that, clients are told to come back later.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.settings.values import ConfigModel, MissingSecret, Secret, secret_value
from watchdog.core.sql import is_table_name

DEFAULT_OTLP_PORT = 4318
DEFAULT_OTLP_GRPC_PORT = 4317
_SIZE = re.compile(r"(\d+)\s*(B|KiB|MiB|GiB)?", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_listen(text: str, key: str = "ingest.listen") -> tuple[str, int]:
    """`127.0.0.1:4318`, `[::1]:4318`, `:4318` or `4318` (loopback); ValueError naming `key`."""
    host, _, port = text.strip().rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{key}: {text!r} is not HOST:PORT (e.g. 127.0.0.1:{DEFAULT_OTLP_PORT})")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def parse_size(value: Any) -> int:
    """A byte count: an integer, or `512KiB`, `16MiB`, `1GiB`."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = _SIZE.fullmatch(str(value).strip())
        if match is None:
            raise ValueError(f"{value!r} is not a size (e.g. 16MiB, 512KiB, 1GiB)")
        number = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]
    if number <= 0:
        raise ValueError(f"{value!r}: must be positive")
    return number


class IngestSettings(ConfigModel):
    """`[ingest]`; `listen` and `grpc_listen` unset: no receiver unless the daemon's flags ask."""

    listen: str | None = None  # OTLP/HTTP, e.g. 127.0.0.1:4318
    grpc_listen: str | None = None  # OTLP/gRPC, e.g. 127.0.0.1:4317
    token: Secret | None = None
    logs_table: str = "otel.otel_logs"
    traces_table: str = "otel.otel_traces"
    spool_dir: str | None = None  # default: <data_dir>/ingest
    max_body: int = 16 * 1024**2  # one request, decompressed
    max_records: int = Field(default=50_000, ge=1)  # log records or spans in one request
    max_queued: int = 512 * 1024**2  # accepted, not yet in the store
    load_every: Duration = timedelta(seconds=2)
    retry_window: Duration = timedelta(minutes=15)  # a retried request is recognised this long

    @field_validator("max_body", "max_queued", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)

    @field_validator("token")
    @classmethod
    def _token(cls, value: Secret | None) -> Secret | None:
        # An empty token (an empty variable, `${OTLP_TOKEN:-}`) would open the receiver to
        # anyone while the config reads as if it were guarded: it is a mistake, never "no token".
        if (
            value is not None
            and not secret_value(value).strip()
            and not isinstance(value, MissingSecret)
        ):
            raise ValueError(
                "is empty, and an empty token would let anyone in: set one"
                " (clients send Authorization: Bearer <token>) or remove the key"
            )
        return value

    @field_validator("logs_table", "traces_table")
    @classmethod
    def _table(cls, value: str) -> str:
        if "." not in value or not is_table_name(value):
            raise ValueError(f"{value!r} is not database.table")
        return value

    @field_validator("listen", "grpc_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value, "")
        return value

    @field_validator("load_every", "retry_window")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive")
        return value

    @model_validator(mode="after")
    def _token_off_loopback(self) -> IngestSettings:
        for listen in self.listens:
            self.require_token_for(listen)
        return self

    @property
    def listens(self) -> tuple[str, ...]:
        """The addresses the receiver binds: OTLP/HTTP's, then OTLP/gRPC's, when set."""
        return tuple(x for x in (self.listen, self.grpc_listen) if x is not None)

    def require_token_for(self, listen: str) -> None:
        """ValueError when `listen` is not loopback and no token is configured."""
        host, _ = parse_listen(listen)
        if not is_loopback(host) and self.token is None:
            raise ValueError(
                f"listening on {host} (not loopback) needs ingest.token"
                ' (e.g. token = "${OTLP_TOKEN}"; clients send Authorization: Bearer <token>)'
            )

    @property
    def missing_token(self) -> MissingSecret | None:
        """The token referenced as `${NAME}` while NAME is unset."""
        return self.token if isinstance(self.token, MissingSecret) else None

    @property
    def token_value(self) -> str:
        """The bearer token, '' when none is configured."""
        return secret_value(self.token)
