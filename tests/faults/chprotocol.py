"""The ClickHouse HTTP protocol as tests/faults/chserver.py speaks it: the errors and their
statuses, which parameters are transport and which are settings, statements and formats,
request and response codecs."""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import gzip
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"

# How ClickHouse maps an exception to an HTTP status (exceptionCodeToHTTPStatus), keyed
# by the error name that ends every engine message, e.g. "... (UNKNOWN_TABLE)".
_BAD_REQUEST = [
    "BAD_ARGUMENTS",
    "CANNOT_COMPILE_REGEXP",
    "CANNOT_PARSE_TEXT",
    "CANNOT_PARSE_ESCAPE_SEQUENCE",
    "CANNOT_PARSE_QUOTED_STRING",
    "CANNOT_PARSE_DATE",
    "CANNOT_PARSE_DATETIME",
    "CANNOT_PARSE_NUMBER",
    "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
    "CANNOT_PARSE_IPV4",
    "CANNOT_PARSE_IPV6",
    "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    "CANNOT_PARSE_UUID",
    "DUPLICATE_COLUMN",
    "ILLEGAL_COLUMN",
    "UNKNOWN_ELEMENT_IN_AST",
    "UNKNOWN_TYPE_OF_AST_NODE",
    "THERE_IS_NO_COLUMN",
    "TOO_DEEP_AST",
    "TOO_BIG_AST",
    "UNEXPECTED_AST_STRUCTURE",
    "SYNTAX_ERROR",
    "INCORRECT_DATA",
    "TYPE_MISMATCH",
    "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
]
_NOT_FOUND = [
    "UNKNOWN_TABLE",
    "UNKNOWN_FUNCTION",
    "UNKNOWN_IDENTIFIER",
    "UNKNOWN_TYPE",
    "UNKNOWN_STORAGE",
    "UNKNOWN_DATABASE",
    "UNKNOWN_SETTING",
    "UNKNOWN_DIRECTION_OF_SORTING",
    "UNKNOWN_AGGREGATE_FUNCTION",
    "UNKNOWN_FORMAT",
    "UNKNOWN_DATABASE_ENGINE",
    "UNKNOWN_TYPE_OF_QUERY",
    "UNKNOWN_ROLE",
]
_STATUS_BY_NAME: dict[str, int] = {
    "REQUIRED_PASSWORD": 401,
    **dict.fromkeys(
        (
            "UNKNOWN_USER",
            "WRONG_PASSWORD",
            "AUTHENTICATION_FAILED",
            "SET_NON_GRANTED_ROLE",
            "ACCESS_DENIED",
        ),
        403,
    ),
    **dict.fromkeys(_BAD_REQUEST, 400),
    **dict.fromkeys(_NOT_FOUND, 404),
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "CANNOT_SCHEDULE_TASK": 503,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}

# URL parameters the HTTP interface consumes itself: never applied as settings.
_TRANSPORT_PARAMS = frozenset(
    {
        "query",
        "database",
        "default_format",
        "user",
        "password",
        "quota_key",
        "query_id",
        "session_id",
        "session_timeout",
        "session_check",
        "compress",
        "decompress",
        "buffer_size",
        "wait_end_of_query",
        "client_protocol_version",
        "role",
        "stacktrace",
    }
)
# Settings that only shape the HTTP exchange: accepted and ignored (the engine has no
# HTTP side, and `readonly` is enforced here rather than on the shared handle).
_HTTP_ONLY_SETTINGS = frozenset(
    {
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "enable_http_compression",
        "http_zlib_compression_level",
        "cancel_http_readonly_queries_on_client_close",
        "http_response_buffer_size",
        "http_wait_end_of_query",
        "add_http_cors_header",
        "http_native_compression_disable_checksumming_on_decompress",
        "readonly",
    }
)
# chdb's Python-only result kinds: they are not byte formats, so never pass them through.
_CHDB_SPECIAL_FORMATS = frozenset({"dataframe", "arrowtable", "debug"})

_SETTING_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE_RE = re.compile(r"Code:\s*(\d+)")
_NAME_RE = re.compile(r"\(([A-Z][A-Z0-9_]{2,})\)")
_TRAILING_FORMAT_RE = re.compile(r"\bFORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$", re.IGNORECASE)
_LEADING_NOISE_RE = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/|\()*", re.DOTALL)
_INSERT_WITH_DATA_RE = re.compile(
    rb"\A(?:\s+|--[^\n]*\n|/\*.*?\*/)*INSERT\s+INTO\s+(?P<target>.{1,65536}?)\s+FORMAT\s+"
    rb"(?P<fmt>[A-Za-z0-9_]+)",
    re.IGNORECASE | re.DOTALL,
)
_NOT_A_DATA_INSERT_RE = re.compile(r"\b(?:VALUES|SELECT|WITH)\b", re.IGNORECASE)
_SETTINGS_SPLIT_RE = re.compile(r"\s+SETTINGS\s+", re.IGNORECASE)

# Statements that answer with a result set (and so with X-ClickHouse-Format), and the
# ones a GET (readonly) request may run.
# `CREATE TABLE IF NOT EXISTS db.t (...)` -> kind TABLE, name db.t (for ACCESS_DENIED's words).
_DDL_TARGET_RE = re.compile(
    r"\A\s*\w+\s+(?:TEMPORARY\s+)?(?P<kind>DATABASE|TABLE|VIEW|DICTIONARY)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(?P<name>[`\w.]+)",
    re.IGNORECASE,
)
_RESULT_KEYWORDS = frozenset({"SELECT", "WITH", "SHOW", "DESC", "DESCRIBE", "EXISTS", "EXPLAIN"})
_READONLY_KEYWORDS = _RESULT_KEYWORDS | {"SET", "USE"}


class ClickHouseError(Exception):
    """An error answered the way ClickHouse answers it: code, name and message text."""

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.message = message

    @classmethod
    def make(cls, code: int, name: str, detail: str) -> ClickHouseError:
        """An error with ClickHouse's `Code: N. DB::Exception: detail. (NAME)` text."""
        return cls(code, name, f"Code: {code}. DB::Exception: {detail}. ({name})")

    @classmethod
    def from_engine(cls, exc: BaseException) -> ClickHouseError:
        """The engine's own message, trimmed to start at `Code:` as a server sends it."""
        text = str(exc).strip()
        start = text.find("Code: ")
        if start > 0:
            text = text[start:]
        code_match = _CODE_RE.search(text)
        names = _NAME_RE.findall(text)
        if not code_match:
            return cls.make(1001, "STD_EXCEPTION", text or type(exc).__name__)
        return cls(int(code_match.group(1)), names[-1] if names else "UNKNOWN_EXCEPTION", text)

    @property
    def status(self) -> int:
        return _STATUS_BY_NAME.get(self.name, 500)

    def body(self, version: str) -> bytes:
        text = self.message.rstrip()
        if "(version " not in text:
            text = f"{text} (version {version})"
        return (text + "\n").encode()


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it, for tests that assert on what the client sent."""

    method: str
    path: str
    params: dict[str, str]
    query: str
    user: str | None
    status: int
    error_code: int | None = None


@dataclass
class _Outcome:
    body: bytes
    fmt: str | None
    summary: dict[str, str]
    timezone: str
    headers: dict[str, str] = field(default_factory=dict)


def _connection_string_of(client: Any) -> str:
    """The chdb connection string of an embedded clickhouse-connect client (or a Store's)."""
    target = client if hasattr(client, "_backend") else getattr(client, "client", None)
    backend = getattr(target, "_backend", None)
    conn_str = getattr(backend, "connection_string", None)
    if not isinstance(conn_str, str):
        raise TypeError(
            "ClickHouseHTTPServer needs an embedded clickhouse-connect client "
            "(clickhouse_connect.get_client(dsn='chdb://...')) or a Store wrapping one"
        )
    return conn_str


def _quote_setting_value(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quote_sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _first_keyword(sql: str) -> str:
    """The statement's first word, upper-cased, past comments and opening parentheses."""
    rest = sql[_LEADING_NOISE_RE.match(sql).end() :]  # type: ignore[union-attr]
    match = re.match(r"[A-Za-z]+", rest)
    return match.group(0).upper() if match else ""


def _content_type(fmt: str | None) -> str:
    if fmt is None:
        return "text/plain; charset=UTF-8"
    lower = fmt.lower()
    if lower.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    if lower.startswith("csv"):
        return "text/csv; charset=UTF-8; header=absent"
    if lower.startswith("json"):
        return "application/json; charset=UTF-8"
    if lower in ("pretty", "vertical", "values", "markdown") or lower.startswith("pretty"):
        return "text/plain; charset=UTF-8"
    return "application/octet-stream"


def _optional_codec(name: str) -> Any:
    """lz4.frame or a zstd module when installed (clickhouse-connect's own optional deps)."""
    with contextlib.suppress(ImportError):
        if name == "lz4":
            import lz4.frame

            return lz4.frame
        if name == "zstd":
            try:
                from compression import zstd  # type: ignore[import-not-found]
            except ImportError:
                from backports import zstd  # type: ignore[no-redef]
            return zstd
    return None


def _decompress_request(body: bytes, encoding: str | None) -> bytes:
    encoding = (encoding or "").strip().lower()
    if not body or encoding in ("", "identity"):
        return body
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
        if encoding in ("lz4", "zstd"):
            codec = _optional_codec(encoding)
            if codec is not None:
                return bytes(codec.decompress(body))
    except Exception as exc:
        raise ClickHouseError.make(
            271, "CANNOT_DECOMPRESS", f"Cannot decompress {encoding} request body: {exc}"
        ) from None
    raise ClickHouseError.make(
        48, "NOT_IMPLEMENTED", f"Unsupported request Content-Encoding: {encoding}"
    )


def _compress_response(body: bytes, accept: str) -> tuple[bytes, str | None]:
    """Compress with the first method in Accept-Encoding that this side can write."""
    for item in accept.split(","):
        method = item.split(";")[0].strip().lower()
        if method == "gzip":
            return gzip.compress(body), method
        if method == "deflate":
            return zlib.compress(body), method
        if method in ("lz4", "zstd"):
            codec = _optional_codec(method)
            if codec is not None:
                return bytes(codec.compress(body)), method
    return body, None


def _parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, str], list[str]]:
    """The plain fields and the names of the file parts of a multipart/form-data body."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, str] = {}
    files: list[str] = []
    if not message.is_multipart():
        return fields, files
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        if part.get_filename() is not None:
            files.append(name)
            continue
        payload = part.get_payload(decode=True)
        fields[name] = payload.decode("utf-8") if isinstance(payload, bytes) else ""
    return fields, files


def _split_data_insert(raw: bytes) -> tuple[str, str, bytes] | None:
    """(`INSERT INTO target`, format, data) when `raw` is an insert whose data follows it."""
    match = _INSERT_WITH_DATA_RE.match(raw)
    if match is None:
        return None
    try:
        target = match.group("target").decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _NOT_A_DATA_INSERT_RE.search(target):
        return None
    # As ClickHouse's parser: the data starts after blanks, then one optional line break.
    pos = match.end()
    while pos < len(raw) and raw[pos : pos + 1] in (b" ", b"\t", b"\f"):
        pos += 1
    if raw[pos : pos + 1] == b"\r":
        pos += 1
    if raw[pos : pos + 1] == b"\n":
        pos += 1
    return target, match.group("fmt").decode("ascii"), raw[pos:]
