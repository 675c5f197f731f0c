"""The settings models: every key of the TOML config (docs/configuration.md), frozen and typed.

Every default lives here. Durations are `timedelta`, quiet hours a
`QuietHours`, a cron line is checked by APScheduler's parser when it loads;
cross-field rules (check ids, custom checks against the lookback) are
validators of `Settings`, so a config that loads is a config every command
can use. The environment is not read here: the loader (`.load`) fills
`data_dir` and `store.url` from it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, SerializeAsAny, field_validator, model_validator

from watchdog.core.durations import Duration, format_duration
from watchdog.core.errors import ConfigError, ConfigErrors, RegistryError
from watchdog.core.settings.alerts import AlertSettings, alerts_model
from watchdog.core.settings.custom import CustomCheck, CustomKinds
from watchdog.core.settings.ingest import IngestSettings
from watchdog.core.settings.plugins import Plugins, PresetEntry
from watchdog.core.settings.slo import SloSettings, slo_problems
from watchdog.core.settings.timing import ScheduleSettings, WindowSettings, window_problems
from watchdog.core.settings.values import ConfigModel as _Settings
from watchdog.core.sql import is_identifier, is_table_name
from watchdog.core.units import TargetText, target_value
from watchdog.core.vocabulary import NoDataPolicy, Severity

# The pseudo check of "the source could not be read" (alerts.lifecycle): routes may name it.
STORE_CHECK_ID = "store"
# The pseudo check of "the daemon's run process died before it finished" (alerts.pipeline).
RUN_CHECK_ID = "run"
PSEUDO_CHECK_IDS = (STORE_CHECK_ID, RUN_CHECK_ID)
# The two alerts of an SLO (docs/slo.md#alerts): `<name>:page` and `<name>:ticket`.
SLO_ALERTS = ("page", "ticket")


def slo_alert_id(slo: str, alert: str) -> str:
    """The check id an SLO's alert goes by in the alert tables and routes: `<slo>:<alert>`."""
    return f"{slo}:{alert}"


DEFAULT_SESSION_KEYS = ("session.id", "gen_ai.conversation.id")
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


@dataclass(frozen=True)
class StoreTLS:
    """TLS to a ClickHouse server: the CA file (None: the system's), whether the server's
    certificate is verified, a client certificate and its key (None: none)."""

    ca_file: str | None = None
    verify: bool = True
    client_cert: str | None = None
    client_key: str | None = None


class StoreSettings(_Settings):
    url: str = ""  # filled by the loader: WATCHDOG_STORE_URL, else under the data directory
    database: str = "watchdog"
    query_timeout: Duration = timedelta(seconds=120)
    lock_timeout: Duration = timedelta(seconds=10)
    cluster: str | None = None
    # TLS to an https:// server (docs/operations.md#tls-to-a-clickhouse-server): the CA bundle
    # that signed its certificate, whether to verify it, a client certificate and its key.
    ca_file: str | None = None
    verify: bool = True
    client_cert: str | None = None
    client_key: str | None = None

    @field_validator("ca_file", "client_cert", "client_key")
    @classmethod
    def _readable_file(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isfile(value):
            raise ValueError(f"{value!r}: no such file (a PEM file's path)")
        if value is not None and not os.access(value, os.R_OK):
            raise ValueError(f"{value!r}: not readable by this user")
        return value

    @model_validator(mode="after")
    def _key_with_cert(self) -> StoreSettings:
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert (the certificate the key is for)")
        return self

    @property
    def tls(self) -> StoreTLS:
        """The TLS options handed to the client of an https:// store."""
        return StoreTLS(self.ca_file, self.verify, self.client_cert, self.client_key)

    @property
    def tls_set(self) -> tuple[str, ...]:
        """The TLS keys this config sets (they apply to an https:// store only)."""
        given = {
            "ca_file": self.ca_file is not None,
            "verify": not self.verify,
            "client_cert": self.client_cert is not None,
            "client_key": self.client_key is not None,
        }
        return tuple(key for key, set_ in given.items() if set_)

    @field_validator("database")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not is_identifier(value):
            raise ValueError(f"{value!r} is not a database name (letters, digits, _)")
        return value

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str | None) -> str | None:
        if value is not None and not is_identifier(value):
            raise ValueError(f"{value!r} is not a cluster name (letters, digits, _)")
        return value


class SourceSettings(_Settings):
    # The registry whose presets `preset` names (`settings_model` sets it and the default).
    plugins: ClassVar[Plugins] = Plugins()

    name: str = ""  # shown in reports and alerts; defaults to the table
    preset: str = ""  # a preset's name; default: the registry's default preset
    table: str | None = None  # preset default when unset
    ignore_sessions: tuple[str, ...] = ("", "interactive", "gateway", "unknown")
    session_filter: str | None = None
    columns: dict[str, str] = Field(default_factory=dict)
    # otel presets: the attribute keys holding the session id, first present wins, in the
    # event's own attributes then the resource's (OpenTelemetry GenAI: the conversation).
    session_keys: tuple[str, ...] = DEFAULT_SESSION_KEYS
    # The attribute (payload, metadata) keys holding an event's error class, first present
    # wins (triage's `error`); None: the preset's (OpenTelemetry's error.type, exception.type).
    error_keys: tuple[str, ...] | None = None
    # The per-session state table `schema apply --materialize` keeps (e.g.
    # "watchdog.session_state"): when set, the session checks read it, not the events.
    state: str | None = None

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if cls.plugins.preset(value) is None:
            *first, last = [f"'{preset.name}'" for preset in cls.plugins.presets] or ["none"]
            listed = f"{', '.join(first)} or {last}" if first else last
            raise ValueError(f"{value!r} is not accepted (accepted: {listed})")
        return value

    @field_validator("table", "state")
    @classmethod
    def _table_name(cls, value: str | None) -> str | None:
        if value is not None and not is_table_name(value):
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

    @field_validator("session_keys", "error_keys")
    @classmethod
    def _attribute_keys(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("needs at least one attribute key")
        for key in value:
            if not re.fullmatch(r"[^\x00-\x1f\x7f]{1,256}", key):
                raise ValueError(f"{key!r} is not an attribute key (1 to 256 printable characters)")
        return value

    @model_validator(mode="after")
    def _keys_for_otel(self) -> SourceSettings:
        if self.session_keys != DEFAULT_SESSION_KEYS and self.facts.signal is None:
            exporters = [p.name for p in self.plugins.presets if p.signal is not None]
            raise ValueError(
                f"session_keys: the {self.preset} preset reads no attribute keys"
                f" (only {' and '.join(exporters)} do)"
            )
        return self

    @property
    def facts(self) -> PresetEntry:
        """The configured preset, as its registry has it."""
        facts = self.plugins.preset(self.preset)
        if facts is None:
            raise RegistryError(f"preset {self.preset!r} is not registered")
        return facts

    @property
    def table_name(self) -> str:
        """The table read: `source.table`, else the preset's."""
        return self.table or self.facts.table

    @property
    def display_name(self) -> str:
        """The source as reports and alerts name it: `source.name`, else the table."""
        return self.name or self.table_name


class EventSettings(_Settings):
    """Event names per role (docs/spec.md section 3)."""

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
    human_message: tuple[str, ...] = ("message.received", "gateway.message.received")
    agent_response: tuple[str, ...] = ("message.sent", "gateway.message.sent", "agent.response")
    # A human message whose payload field `trivial_field` is one of `trivial_kinds` is
    # trivial (a greeting, an ack, a heartbeat): no recall is owed before answering it.
    trivial_field: str = Field(default="kind", min_length=1)
    trivial_kinds: tuple[str, ...] = ("greeting", "ack", "heartbeat")

    @property
    def recall_any(self) -> tuple[str, ...]:
        return self.recall_started + self.recall_completed + self.recall_failed

    @property
    def observe_any(self) -> tuple[str, ...]:
        return self.observe_requested + self.observe_completed + self.observe_failed


class DeviationSettings(_Settings):
    """The agent deviation contract (docs/spec.md section 5)."""

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
    # The agent names an `agente` may take; empty: any name of 1-64 of A-Z a-z 0-9 _ . -
    agents: tuple[str, ...] = ()


class CheckOverride(_Settings):
    """`[checks.<id>]`: any field left out keeps the check's own default."""

    enabled: bool | None = None
    # As written (`0.05`, "5%", "3s"); its check's unit reads it (`Settings.target_of`).
    target: TargetText | None = None
    severity: Severity | None = None
    min_samples: int | None = Field(default=None, ge=0)
    no_data: NoDataPolicy | None = None


class ReportSettings(_Settings):
    dir: str | None = None  # default: the data directory
    keep: int = Field(default=200, ge=1)
    error_classes: bool = True
    base_url: str | None = None  # where `daemon --http` is reached: alerts link to its pages
    history: int = Field(default=42, ge=1)

    @field_validator("base_url")
    @classmethod
    def _page_root(cls, value: str | None) -> str | None:
        """An http(s) root the page path is appended to, and that Slack's `<url|text>` can hold."""
        if value is None:
            return value
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
            raise ValueError(f"{value!r} is not an http(s) URL (e.g. https://watchdog.example)")
        if re.search(r"[?#<>|&\s]", value):
            raise ValueError(
                f"{value!r}: a page root has no query, fragment, space or any of < > | &"
            )
        return value


class Settings(_Settings):
    # The registry these settings were validated against: its kinds, built-in checks, presets
    # and receivers (`settings_model` builds the model of each registry, once).
    plugins: ClassVar[Plugins] = Plugins()

    # Where the watchdog keeps its files (default store, spool, pages); the loader fills
    # it from XDG_DATA_HOME, else ~/.local/share, plus /memory-watchdog.
    data_dir: Path = Path("memory-watchdog")
    store: StoreSettings = StoreSettings()
    source: SourceSettings = SourceSettings()
    window: WindowSettings = WindowSettings()
    events: EventSettings = EventSettings()
    deviation: DeviationSettings = DeviationSettings()
    checks: dict[str, CheckOverride] = Field(default_factory=dict)
    schedule: ScheduleSettings = ScheduleSettings()
    alerts: AlertSettings = AlertSettings()
    report: ReportSettings = ReportSettings()
    ingest: IngestSettings = IngestSettings()
    slo: SloSettings = SloSettings()
    # `[[checks.custom]]` in the file; moved here before validation (see the loader).
    custom_checks: tuple[SerializeAsAny[CustomCheck], ...] = ()
    # The file these settings were read from, absolute (None: the built-in defaults): not a key
    # of it, but what a command the program prints for the user names (`--config`).
    _config_file: str | None = PrivateAttr(default=None)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its registry's name (`plugins.origin`): its model and the models of its
        source and alerts are built from the registry, and are rebuilt so on the other side."""
        if not self.plugins.origin:
            raise RegistryError("settings of a registry with no origin cannot cross processes")
        state = self.__getstate__()
        fields = dict(state["__dict__"])
        parts = {name: fields.pop(name).__getstate__() for name in _REGISTRY_PARTS}
        return (_restored, (self.plugins.origin, {**state, "__dict__": fields}, parts))

    @property
    def config_file(self) -> str | None:
        """The config file these settings were read from (absolute), None for the defaults."""
        return self._config_file

    def read_from(self, path: str) -> Settings:
        """These settings, read from the config file `path`."""
        copy = self.model_copy()
        copy._config_file = os.path.abspath(path)
        return copy

    @field_validator("custom_checks", mode="before")
    @classmethod
    def _custom_kinds(cls, value: Any) -> tuple[CustomCheck, ...]:
        """Each `[[checks.custom]]` table validated by the model of its kind."""
        declarable = {k.name: k.config for k in cls.plugins.kinds if k.config is not None}
        return CustomKinds(declarable).validate(value)

    @model_validator(mode="before")
    @classmethod
    def _source_of_ingest(cls, data: Any) -> Any:
        """With `[ingest] listen` and no source preset or table: read what the receiver writes."""
        if not isinstance(data, dict):
            return data
        ingest, source = data.get("ingest"), data.get("source", {})
        if (
            isinstance(ingest, dict)
            and (ingest.get("listen") is not None or ingest.get("grpc_listen") is not None)
            and isinstance(source, dict)
            and "preset" not in source
            and "table" not in source
        ):
            table = ingest.get("logs_table", IngestSettings().logs_table)
            preset = cls.plugins.preset_of_signal("logs").name
            data = {**data, "source": {**source, "preset": preset, "table": table}}
        return data

    @model_validator(mode="after")
    def _checks_are_known(self) -> Settings:
        """Custom ids unique and not built-in, each fitting the lookback; overrides and routes
        of known ids, targets in their checks' units. ConfigErrors names every problem."""
        problems = window_problems(self.window, self.schedule)
        builtin = self.plugins.check_ids
        taken = set(builtin)
        longest = self.schedule.gaps()[1]
        lookback = self.window.reach(longest)
        for index, check in enumerate(self.custom_checks):
            if check.id in taken or check.id in PSEUDO_CHECK_IDS:
                what = (
                    "a built-in check id"
                    if check.id in builtin
                    else "the watchdog's own alert"
                    if check.id in PSEUDO_CHECK_IDS
                    else "already used above"
                )
                problems.append(
                    ConfigError(f"checks.custom[{index}].id", f"{check.id!r} is {what}")
                )
            taken.add(check.id)
            if check.reach(longest) > lookback:
                problems.append(
                    ConfigError(
                        f"checks.custom[{index}].window",
                        "the window plus the grace must fit in window.lookback"
                        f" ({format_duration(lookback)}); shorten it or raise the lookback",
                    )
                )
        custom = sorted(taken - set(builtin))
        accepted = ", ".join([*builtin, *custom])
        for check_id, override in self.checks.items():
            if check_id not in taken:
                problems.append(
                    ConfigError(f"checks.{check_id}", f"unknown check id (accepted: {accepted})")
                )
            elif override.target is not None:
                try:
                    self.target_of(check_id, override.target)
                except ConfigError as exc:
                    problems.append(exc)
        slo_alerts = [slo_alert_id(name, a) for name in self.slo.enabled for a in SLO_ALERTS]
        for index, route in enumerate(self.alerts.routes):
            for check_id in route.checks:
                if check_id not in (*taken, *PSEUDO_CHECK_IDS, *slo_alerts):
                    problems.append(
                        ConfigError(
                            f"alerts.routes[{index}].checks",
                            f"unknown check id {check_id!r} (accepted: {accepted},"
                            f" {', '.join([*PSEUDO_CHECK_IDS, *slo_alerts])})",
                        )
                    )
        problems += slo_problems(self.slo, self.sli_of, self.slo_checks)
        if problems:
            raise ConfigErrors.of(problems)
        return self

    @property
    def sli_of(self) -> dict[str, str | None]:
        """Every check id, and the SLI an SLO over it measures (None: no SLO can follow it)."""
        plugins = self.plugins
        found = {check_id: plugins.sli_of(check_id) for check_id in plugins.check_ids}
        for check in self.custom_checks:
            found.setdefault(check.id, plugins.sli_of_kind(check.kind))
        return found

    @property
    def slo_checks(self) -> tuple[str, ...]:
        """The check ids an SLO may follow (`[slo.<name>] check`), in report order."""
        return tuple(check_id for check_id, sli in self.sli_of.items() if sli is not None)

    def target_of(self, check_id: str, written: float | str) -> float:
        """A target written for `check_id` (`[checks.<id>] target`), in the check's unit.

        ConfigError naming the key when it does not fit the unit (checked when the config loads).
        """
        custom = {c.id: c.unit for c in self.custom_checks}
        unit = self.plugins.unit_of(check_id) or custom[check_id]
        try:
            return target_value(written, unit)
        except ValueError as exc:
            raise ConfigError(f"checks.{check_id}.target", str(exc)) from None

    @property
    def check_ids(self) -> tuple[str, ...]:
        """Every check id: the built-in ones in report order, then the custom ones."""
        return self.plugins.check_ids + tuple(c.id for c in self.custom_checks)

    @property
    def source_named(self) -> bool:
        """Whether the config names the source (its preset or table), or the receiver does."""
        return bool({"preset", "table"} & self.source.model_fields_set)

    def with_default_source(self, holds: Callable[[str], bool]) -> Settings:
        """These settings judging the default source when the config names none, the same one
        for every command and the daemon: the OTLP receiver's logs table when the store `holds`
        it (`daemon --otlp` writes and judges it), else the joelclaw preset's table
        (docs/configuration.md#the-default-source)."""
        if self.source_named or not holds(self.ingest.logs_table):
            return self
        return self.receiving()

    def receiving(self, listen: str | None = None, grpc_listen: str | None = None) -> Settings:
        """These settings with the OTLP receiver on `listen` (`daemon --otlp`) and/or
        `grpc_listen` (`--otlp-grpc`); None keeps the configured address.

        A source the config does not name (no preset, no table) becomes the
        otel_logs preset on the table the receiver writes.
        """
        addresses = {"listen": listen, "grpc_listen": grpc_listen}
        given = {k: v for k, v in addresses.items() if v is not None}
        update: dict[str, Any] = {"ingest": self.ingest.model_copy(update=given)}
        if not self.source_named:
            update["source"] = self.source.model_copy(
                update={
                    "preset": self.plugins.preset_of_signal("logs").name,
                    "table": self.ingest.logs_table,
                }
            )
        return self.model_copy(update=update)

    def with_store_url(self, url: str) -> Settings:
        """These settings reading another store (`--store`)."""
        return self.model_copy(update={"store": self.store.model_copy(update={"url": url})})


# The fields of Settings whose models each registry builds (`settings_model`).
_REGISTRY_PARTS = ("source", "alerts")


def _restored(origin: str, state: dict[str, Any], parts: dict[str, Any]) -> Settings:
    """Settings unpickled (`Settings.__reduce__`): the models of the registry at `origin`."""
    model = settings_model(Plugins.imported(origin))
    fields = dict(state["__dict__"])
    for name, part_state in parts.items():
        part_model = model.model_fields[name].annotation
        if not (isinstance(part_model, type) and issubclass(part_model, _Settings)):
            raise RegistryError(f"settings.{name} is no settings model")
        part = part_model.__new__(part_model)
        part.__setstate__(part_state)
        fields[name] = part
    settings = model.__new__(model)
    settings.__setstate__({**state, "__dict__": fields})
    return settings


@functools.cache
def settings_model(plugins: Plugins) -> type[Settings]:
    """The settings model of `plugins`: the custom tables of its kinds, overrides of its
    built-in checks, its presets and a table per receiver kind (built once per registry)."""
    source = type(
        "SourceSettings",
        (SourceSettings,),
        {
            "__module__": __name__,
            "__doc__": SourceSettings.__doc__,
            "__annotations__": {"preset": "str"},
            "preset": plugins.default_preset,
            "plugins": plugins,
        },
    )
    alerts = alerts_model(plugins)
    return type(
        "Settings",
        (Settings,),
        {
            "__module__": __name__,
            "__doc__": Settings.__doc__,
            "__annotations__": {"source": source, "alerts": alerts},
            "source": source(),
            "alerts": alerts(),
            "plugins": plugins,
        },
    )
