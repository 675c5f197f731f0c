"""Settings: the TOML config (SPEC section 7), validated once into frozen values.

Every key is optional and every default lives in the models below.
Environment variables are read here and nowhere else: `WATCHDOG_CONFIG`,
`WATCHDOG_STORE_URL`, `XDG_DATA_HOME`, and `${NAME}` references inside string
values of the file.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from datetime import time, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from watchdog.core.custom_settings import KINDS as CUSTOM_KINDS
from watchdog.core.custom_settings import MODELS as CUSTOM_MODELS
from watchdog.core.custom_settings import CustomCheck
from watchdog.core.durations import DURATION_HINT, Duration, format_duration, parse_duration
from watchdog.core.errors import ConfigError

__all__ = ["DURATION_HINT", "Duration", "format_duration", "parse_duration"]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def default_data_dir() -> Path:
    """The user's data directory for memory-watchdog (XDG_DATA_HOME honoured)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memory-watchdog"


class StoreSettings(_Settings):
    url: str = ""  # filled by load_settings: WATCHDOG_STORE_URL, else the data directory
    database: str = "watchdog"
    query_timeout: Duration = timedelta(seconds=120)
    lock_timeout: Duration = timedelta(seconds=10)
    cluster: str | None = None

    @field_validator("database")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not a database name (letters, digits, _)")
        return value


PresetName = Literal["joelclaw", "otel_logs", "otel_traces", "normalized"]
NORMALIZED_COLUMNS = (
    "event_id",
    "ts",
    "session_id",
    "name",
    "latency_ms",
    "trigger",
    "result_count",
    "payload",
)


class SourceSettings(_Settings):
    name: str = ""  # shown in reports and alerts; defaults to the table
    preset: PresetName = "joelclaw"
    table: str | None = None  # preset default when unset
    ignore_sessions: tuple[str, ...] = ("", "interactive", "gateway", "unknown")
    session_filter: str | None = None
    columns: dict[str, str] = Field(default_factory=dict)

    @field_validator("table")
    @classmethod
    def _table_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", value
        ):
            raise ValueError(f"{value!r} is not a table name (database.table)")
        return value

    @field_validator("columns")
    @classmethod
    def _known_columns(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key not in NORMALIZED_COLUMNS:
                raise ValueError(
                    f"unknown normalized column {key!r} (accepted: {', '.join(NORMALIZED_COLUMNS)})"
                )
        return value


class WindowSettings(_Settings):
    length: Duration = timedelta(hours=4)
    lookback: Duration = timedelta(hours=24)
    recall_grace: Duration = timedelta(minutes=5)
    observe_grace: Duration = timedelta(minutes=15)
    idle_timeout: Duration = timedelta(hours=6)

    @model_validator(mode="after")
    def _lookback_covers_deadlines(self) -> WindowSettings:
        for key in ("length", "lookback", "idle_timeout"):
            if getattr(self, key) <= timedelta(0):
                raise ValueError(f"{key} must be positive")
        need = self.length + max(self.idle_timeout, self.recall_grace, self.observe_grace)
        if self.lookback < need:
            raise ValueError(
                f"lookback {format_duration(self.lookback)} is too short to judge the "
                f"obligations due in a window: it must be at least length + the longest of "
                f"idle_timeout and the graces ({format_duration(need)})"
            )
        return self


class EventSettings(_Settings):
    """Event names per role (SPEC section 3)."""

    session_end: tuple[str, ...] = ("session.ended", "session.shutdown")
    compaction: tuple[str, ...] = ("session.compacted", "compaction.before")
    recall_started: tuple[str, ...] = ("memory.recall.started",)
    recall_completed: tuple[str, ...] = ("memory.recall.completed",)
    recall_failed: tuple[str, ...] = ("memory.recall.failed",)
    recall_injected: tuple[str, ...] = ("memory.recall.injected",)
    observe_requested: tuple[str, ...] = (
        "memory.observe.requested",
        "memory.observe.started",
        "observe.started",
    )
    observe_completed: tuple[str, ...] = ("memory.observe.completed", "observe.store.completed")
    observe_failed: tuple[str, ...] = ("memory.observe.failed", "observe.store.failed")
    gate_decision: tuple[str, ...] = ("memory.gate.decision",)
    agent_deviation: tuple[str, ...] = ("anamnese.agent_deviation",)

    @property
    def recall_any(self) -> tuple[str, ...]:
        return self.recall_started + self.recall_completed + self.recall_failed

    @property
    def observe_any(self) -> tuple[str, ...]:
        return self.observe_requested + self.observe_completed + self.observe_failed


class DeviationSettings(_Settings):
    """The agent deviation contract (SPEC section 5)."""

    allowed_keys: tuple[str, ...] = ("agente", "tipo", "evidenceEventIds")
    envelope_keys: tuple[str, ...] = (
        "session.id",
        "session_id",
        "sessionId",
        "event.name",
        "event.id",
    )
    tipos: tuple[str, ...] = ("laco", "cancelamento_pelo_usuario", "reparo_pelo_usuario")
    max_evidence: int = Field(default=20, ge=0)


Severity = Literal["critical", "warning", "info"]


class CheckOverride(_Settings):
    """`[checks.<id>]`: any field left out keeps the check's own default."""

    enabled: bool | None = None
    target: float | None = None
    severity: Severity | None = None
    min_samples: int | None = Field(default=None, ge=0)


class ScheduleSettings(_Settings):
    every: Duration | None = None
    cron: str | None = None
    timezone: str = "UTC"
    delay: Duration = timedelta(minutes=2)
    max_catchup: int = Field(default=6, ge=0)
    misfire_grace: Duration = timedelta(minutes=30)

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleSettings:
        if self.every is not None and self.cron is not None:
            raise ValueError("set either every or cron, not both")
        if self.every is not None and self.every <= timedelta(0):
            raise ValueError("every must be positive")
        return self

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)"
            ) from None
        return value

    @property
    def period(self) -> timedelta:
        """The schedule's period when it is `every` (default 4h)."""
        return self.every if self.every is not None else timedelta(hours=4)


_CLOCK_RANGE = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")
QUIET_HOURS_HINT = "a daily range HH:MM-HH:MM, e.g. 22:00-07:00"


def parse_quiet_hours(text: str) -> tuple[time, time]:
    """`22:00-07:00` -> (22:00, 07:00); the range may wrap midnight. ValueError otherwise."""
    match = _CLOCK_RANGE.fullmatch(text.strip().replace(" ", ""))
    if not match:
        raise ValueError(f"{text!r} is not {QUIET_HOURS_HINT}")
    hour1, minute1, hour2, minute2 = (int(g) for g in match.groups())
    start, end = time(hour1, minute1), time(hour2, minute2)
    if start == end:
        raise ValueError(f"{text!r} is empty: start and end are the same time")
    return start, end


def _check_quiet(quiet_hours: str | None, quiet_timezone: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if quiet_hours is not None:
        parse_quiet_hours(quiet_hours)
    try:
        ZoneInfo(quiet_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"quiet_timezone {quiet_timezone!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)"
        ) from None


class SlackSettings(_Settings):
    """A Slack notifier: an incoming webhook, or a bot token and a channel.

    `webhook_url` and `token` are secrets: pydantic's SecretStr keeps them out
    of every repr, dump and log line; only the notifier reads their value.
    """

    webhook_url: SecretStr | None = None
    token: SecretStr | None = None
    channel: str | None = None
    base_url: str | None = None  # Slack's API root; for tests and proxies
    quiet_hours: str | None = None  # e.g. "22:00-07:00": hold non-critical notifications
    quiet_timezone: str = "UTC"
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSettings:
        webhook = self.webhook_url.get_secret_value() if self.webhook_url else ""
        token = self.token.get_secret_value() if self.token else ""
        if bool(webhook) == bool(token):
            raise ValueError("set webhook_url, or token and channel (exactly one mode)")
        if webhook and not webhook.startswith(("https://", "http://")):
            raise ValueError("webhook_url is not an http(s) URL (value not shown: it is a secret)")
        if token and not self.channel:
            raise ValueError('token needs channel (e.g. channel = "#memory-alerts")')
        if self.timeout <= timedelta(0):
            raise ValueError("timeout must be positive")
        _check_quiet(self.quiet_hours, self.quiet_timezone)
        return self


class StdoutSettings(_Settings):
    """The stdout notifier: the same message as plain text, for cron mail and debugging."""

    enabled: bool = True
    quiet_hours: str | None = None
    quiet_timezone: str = "UTC"

    @model_validator(mode="after")
    def _quiet(self) -> StdoutSettings:
        _check_quiet(self.quiet_hours, self.quiet_timezone)
        return self


class AlertSettings(_Settings):
    """`[alerts]`: the alert lifecycle (SPEC section 8) and its delivery."""

    repeat_interval: Duration = timedelta(hours=24)
    pending_runs: int = Field(default=1, ge=1)  # consecutive breached runs that open an alert
    max_delivery_age: Duration = timedelta(days=7)  # undelivered older than this is dropped
    delivery_timeout: Duration = timedelta(seconds=60)  # total delivery time within one run
    templates_dir: str | None = None  # overrides alerts/templates/*.j2 file by file
    slack: SlackSettings | None = None
    stdout: StdoutSettings | None = None

    @model_validator(mode="after")
    def _positive(self) -> AlertSettings:
        for key in ("repeat_interval", "max_delivery_age", "delivery_timeout"):
            if getattr(self, key) <= timedelta(0):
                raise ValueError(f"{key} must be positive")
        if self.max_delivery_age > timedelta(days=30):
            raise ValueError("max_delivery_age must be at most 30d (the outbox keeps rows 90 days)")
        return self


class ReportSettings(_Settings):
    dir: str | None = None  # default: <data dir>/reports
    keep: int = Field(default=200, ge=1)
    error_classes: bool = True
    base_url: str | None = None
    history: int = Field(default=42, ge=1)


class Settings(_Settings):
    store: StoreSettings = StoreSettings()
    source: SourceSettings = SourceSettings()
    window: WindowSettings = WindowSettings()
    events: EventSettings = EventSettings()
    deviation: DeviationSettings = DeviationSettings()
    checks: dict[str, CheckOverride] = Field(default_factory=dict)
    schedule: ScheduleSettings = ScheduleSettings()
    alerts: AlertSettings = AlertSettings()
    report: ReportSettings = ReportSettings()
    # `[[checks.custom]]` in the file; moved here before validation (see settings_from_mapping).
    custom_checks: tuple[CustomCheck, ...] = ()


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(value: Any, env: Mapping[str, str], path: str) -> Any:
    """Replace `${NAME}` (or `${NAME:-default}`) in every string of the parsed TOML."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                path, f"environment variable {name} is not set (referenced as ${{{name}}})"
            )

        return _ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, env, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _describe(error: Any, data: Mapping[str, Any]) -> tuple[str, str]:
    """The key path and problem of pydantic's first error, in our words."""
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    if loc[:1] == ["custom_checks"]:
        return _describe_custom(error, loc)
    key = ".".join(loc)
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        accepted = ", ".join(parent.model_fields) if parent else ""
        return key, f"unknown key (accepted: {accepted})" if accepted else "unknown key"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return key, f"{error.get('input')!r} is not accepted (accepted: {expected})"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if kind in ("missing",):
        return key, "is required"
    return key, message


def _describe_custom(error: Any, loc: list[str]) -> tuple[str, str]:
    """Errors inside `[[checks.custom]]`, named by table index and key."""
    kind = error["type"]
    if len(loc) < 2:
        return "checks.custom", "must be an array of tables ([[checks.custom]])"
    base = f"checks.custom[{loc[1]}]"
    accepted = ", ".join(CUSTOM_KINDS)
    if kind == "union_tag_not_found":
        return f"{base}.kind", f"is required (accepted: {accepted})"
    if kind == "union_tag_invalid":
        tag = error.get("ctx", {}).get("tag", "")
        return f"{base}.kind", f"{tag!r} is not accepted (accepted: {accepted})"
    rest = loc[3:]  # loc[2] is the kind tag of the discriminated union
    key = ".".join([base, *rest])
    if kind == "extra_forbidden":
        model = CUSTOM_MODELS.get(loc[2])
        fields = ", ".join(model.model_fields) if model else ""
        return key, f"unknown key for kind {loc[2]} (accepted: {fields})"
    if kind == "missing":
        return key, f"is required for kind {loc[2]}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return key, f"{error.get('input')!r} is not accepted (accepted: {expected})"
    message = str(error["msg"]).removeprefix("Value error, ")
    return key, message


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = Settings
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return CheckOverride if model is Settings and part else None
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            if part == "checks":
                return CheckOverride
            return None
        model = nested[0]
    return model


def settings_from_mapping(
    data: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    origin: str | None = None,
) -> Settings:
    """Validate parsed TOML into Settings; ConfigError names the first bad key."""
    env = os.environ if env is None else env
    expanded = _expand_env(dict(data), env, "")
    checks = expanded.get("checks")
    if isinstance(checks, dict) and "custom" in checks:
        checks = dict(checks)
        expanded = {**expanded, "checks": checks, "custom_checks": checks.pop("custom")}
        if not isinstance(expanded["custom_checks"], list):
            raise ConfigError(
                "checks.custom", "must be an array of tables ([[checks.custom]])", origin=origin
            )
    try:
        settings = Settings.model_validate(expanded)
    except ValidationError as exc:
        key, problem = _describe(exc.errors()[0], expanded)
        raise ConfigError(key, problem, origin=origin) from None
    except ConfigError as exc:
        raise ConfigError(exc.key, exc.problem, origin=origin) from None
    # Precedence: --store (applied by the caller), WATCHDOG_STORE_URL, store.url, the default.
    url = (
        env.get("WATCHDOG_STORE_URL")
        or settings.store.url
        or f"chdb://{default_data_dir() / 'store'}"
    )
    if url != settings.store.url:
        settings = settings.model_copy(
            update={"store": settings.store.model_copy(update={"url": url})}
        )
    return settings


def load_settings(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read the config file (`path`, else WATCHDOG_CONFIG, else defaults) into Settings."""
    env = os.environ if env is None else env
    path = path or env.get("WATCHDOG_CONFIG") or None
    data: dict[str, Any] = {}
    if path:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("", f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError("", f"config file {path} is a directory") from None
        except PermissionError:
            raise ConfigError("", f"config file {path} is not readable") from None
        except UnicodeDecodeError:
            raise ConfigError("", f"config file {path} is not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("", f"invalid TOML: {exc}", origin=path) from None
    return settings_from_mapping(data, env=env, origin=path)
