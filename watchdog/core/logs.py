"""Logging for every process of the watchdog: our own lines on stderr, third parties only with --debug.

`--log-format` text (the default), json or logfmt; a command's one-line problems (`said`) follow
it. The daemon's lines: docs/operations.md#the-daemon; the formats:
docs/operations.md#log-formats-json-and-logfmt.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

OWN_LOGGERS = ("watchdog", "checks", "alerts", "benchmarks")
LOG_FORMATS = ("text", "json", "logfmt")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROG = "memory-watchdog"
# The logger of a command's one-line problems: its own handler, not the root's.
SAID_LOGGER = "watchdog.cli"

# What every LogRecord carries; anything else on a record came in through `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


@dataclass(frozen=True)
class LogSetup:
    """How a process logs: with --debug (third-party records, tracebacks) and in which format;
    handed to the daemon's tick and load processes, which set up their own logging."""

    debug: bool = False
    format: str = "text"


DEFAULT_LOGS = LogSetup()


def _own_records(record: logging.LogRecord) -> bool:
    return record.name.split(".")[0] in OWN_LOGGERS or record.levelno >= logging.CRITICAL


def record_time(record: logging.LogRecord) -> str:
    """The record's time, RFC 3339 UTC with `Z` and milliseconds."""
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def record_fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    """The record as fields: time, level, logger, message, its `extra=` fields, the traceback."""
    fields: dict[str, Any] = {
        "time": record_time(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_") and key not in fields:
            fields[key] = value
    if record.exc_info:
        fields["exception"] = formatter.formatException(record.exc_info)
    return fields


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def render_json(fields: Mapping[str, Any]) -> str:
    """One JSON object on one line (a newline inside a value is escaped)."""
    return json.dumps(fields, ensure_ascii=False, default=_json_value, separators=(",", ":"))


_BARE = re.compile(r"[^\s\"=\\]+")


def _logfmt_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        text = ",".join(str(item) for item in value)
    elif isinstance(value, int | float):
        text = str(value)
    else:
        text = value if isinstance(value, str) else _json_value(value)
    if _BARE.fullmatch(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\r", "\\r").replace("\t", "\\t") + '"'


def render_logfmt(fields: Mapping[str, Any]) -> str:
    """One `key=value` line; a value with a space, quote, `=` or newline is quoted and escaped."""
    out = []
    for key, value in fields.items():
        name = "msg" if key == "message" else re.sub(r"[^\w.-]", "_", key)
        out.append(f"{name}={_logfmt_value(value)}")
    return " ".join(out)


class StructuredFormatter(logging.Formatter):
    """A record as one line of fields, rendered by `render` (JSON or logfmt).

    Secrets are masked before a record is formatted (`alerts.receivers.secrets.SecretFilter`
    rewrites the message), so every format shows them masked.
    """

    def __init__(self, render: Callable[[Mapping[str, Any]], str]) -> None:
        super().__init__()
        self.render = render

    def format(self, record: logging.LogRecord) -> str:
        return self.render(record_fields(record, self))


class _SaidText(logging.Formatter):
    """A command's problem as it has always read: `memory-watchdog: <line>`."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{PROG}: {record.getMessage()}"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever `sys.stderr` is when it writes (as print would)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def formatter_for(log_format: str) -> logging.Formatter:
    """The formatter of `--log-format` (`LOG_FORMATS`)."""
    if log_format == "json":
        return StructuredFormatter(render_json)
    if log_format == "logfmt":
        return StructuredFormatter(render_logfmt)
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(setup: LogSetup) -> None:
    """Our own warnings on stderr; third-party chatter only with --debug (errors are one line).

    A filter on the handler rather than logger levels: libraries such as
    clickhouse-connect set their loggers' levels when imported. As `logging.basicConfig`, it
    leaves a root logger that already has handlers alone (pytest's capture, an embedding app).
    """
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter_for(setup.format))
        if not setup.debug:
            handler.addFilter(_own_records)
        root.addHandler(handler)
        root.setLevel(logging.DEBUG if setup.debug else logging.WARNING)
        # Python warnings (urllib3's InsecureRequestWarning under store.verify = false) are
        # third-party records too: in the log's format with --debug, else not shown.
        logging.captureWarnings(True)
    said = logging.getLogger(SAID_LOGGER)
    said.propagate = False
    for old in list(said.handlers):
        said.removeHandler(old)
    handler = _Stderr()
    handler.setFormatter(_SaidText() if setup.format == "text" else formatter_for(setup.format))
    said.addHandler(handler)


def said(line: str, *, level: int = logging.ERROR) -> None:
    """A command's one-line problem or warning on stderr, in the process's log format (plain
    `memory-watchdog: <line>` before `configure_logging` has run)."""
    logger = logging.getLogger(SAID_LOGGER)
    if not logger.handlers:
        print(f"{PROG}: {line}", file=sys.stderr)
        return
    logger.log(level, line)


def log_format_in(argv: list[str]) -> str:
    """The `--log-format` value on a command line (before it is parsed: logging comes first);
    "text" when absent or not one of `LOG_FORMATS` (the parser then says what is wrong)."""
    for i, token in enumerate(argv):
        if token == "--":
            break
        value = None
        if token == "--log-format" and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith("--log-format="):
            value = token.partition("=")[2]
        if value in LOG_FORMATS:
            return value
    return "text"
