"""What a driver error means: one line for it, and whether the store refused the statement.

clickhouse-connect carries a server error's code and name; transport errors
carry none. `describe_clickhouse_error` words each as one line (the server's
name first, its words after), `refused_by_store` says whether the store
answered that it will not run the statement, which the receiver's loads rely
on: only then may a load be split, or set aside
(docs/guarantees.md#hardening-round-4).
"""

from __future__ import annotations

import re
import socket

from watchdog.core.urls import mask_urls_in

# ClickHouse's symbolic error names (the driver carries them) and what they mean for us.
_MEANINGS = {
    "UNKNOWN_TABLE": "table not found",
    "UNKNOWN_DATABASE": "database not found",
    "UNKNOWN_IDENTIFIER": "column not found",
    "NO_SUCH_COLUMN_IN_TABLE": "column not found",
    "AUTHENTICATION_FAILED": "authentication failed (check user and password)",
    "REQUIRED_PASSWORD": "authentication failed (check user and password)",
    "UNKNOWN_USER": "authentication failed (unknown user)",
    # Reading the source needs SELECT; `--notify` and the daemon also write their own database.
    "ACCESS_DENIED": "access denied (the user lacks a grant; see docs/operations.md, Grants)",
    "TIMEOUT_EXCEEDED": "query timed out (raise store.query_timeout)",
    "READONLY": "the user is read-only (the watchdog's own database needs writes)",
    "NOT_ENOUGH_SPACE": "the store's disk is full",
    "CANNOT_WRITE_TO_FILE_DESCRIPTOR": "the store could not write to its disk",
}


def _server_detail(text: str) -> str:
    """ClickHouse's own words without the code prefix, the error name and the version."""
    detail = re.search(r"DB::Exception: (.*?)(?: \(\w+\))?(?: \(version.*)?$", text)
    return detail.group(1) if detail else text


def describe_clickhouse_error(exc: BaseException) -> str:
    """One line for a driver error: its meaning from the server's error name, then its words.

    Server errors are classified by the name the driver carries (`UNKNOWN_TABLE`);
    transport errors, which have none, by their kind.
    """
    text = mask_urls_in(" ".join(str(exc).split()))
    name = getattr(exc, "name", None)
    if name in _MEANINGS:
        return f"{_MEANINGS[name]}: {_server_detail(text)}"[:400]
    if name:
        return f"{_server_detail(text)} ({name})"[:400]
    if isinstance(exc, TimeoutError) or "timed out" in text.lower():
        return "query timed out (raise store.query_timeout)"
    if "SSLError" in text or "[SSL" in text:
        return _tls_problem(text)
    if "Unexpected response to server version query" in text:
        return (
            "unexpected response to the first query (the connection was cut,"
            " or the server at this URL is not ClickHouse)"
        )
    if name_not_resolved(exc):
        return NOT_RESOLVED
    if isinstance(exc, ConnectionRefusedError) or any(s in text for s in _UNREACHABLE_SIGNS):
        return "unreachable (connection refused or no route to the server)"
    if any(sign in text for sign in _CUT_SIGNS):
        return "the connection was reset or cut mid-response (check the server and any proxy)"
    return text[:400]


def _tls_problem(text: str) -> str:
    """A TLS handshake that failed, with OpenSSL's reason and the `[store]` key that helps."""
    found = re.search(r"\[SSL: (\w+)\] ([^'(]+)", text) or re.search(
        r"SSL\w*Error\(\w+\(\d+, '([^'(]+)", text
    )
    reason = found.group(found.lastindex or 0).strip() if found else "no reason given"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            f"TLS: the server's certificate could not be verified ({reason}); set"
            " store.ca_file to the CA that signed it (docs/operations.md#tls-to-a-clickhouse-server)"
        )
    return (
        f"TLS handshake failed ({reason}); check that the port speaks TLS, and set"
        " store.client_cert and store.client_key when the server asks for a client certificate"
    )


NOT_RESOLVED = "the host name could not be resolved (DNS): check the host in the URL"

# How a host name that did not resolve reads: the resolver's words (glibc, musl, macOS,
# Windows), and urllib3's, which clickhouse-connect passes on as text.
_UNRESOLVED_SIGNS = (
    "NameResolutionError",
    "Failed to resolve",
    "Name or service not known",
    "Name does not resolve",
    "nodename nor servname",
    "Temporary failure in name resolution",
    "No address associated with hostname",
    "getaddrinfo failed",
)


def name_not_resolved(exc: BaseException) -> bool:
    """Whether a transport error is a host name that could not be resolved (not a refusal: no
    server was ever asked), for the store and the receivers alike."""
    reason = getattr(exc, "reason", None)  # urllib's URLError wraps the resolver's error
    if isinstance(exc, socket.gaierror) or isinstance(reason, socket.gaierror):
        return True
    return any(sign in str(exc) for sign in _UNRESOLVED_SIGNS)


# How clickhouse-connect (urllib3) words a server it cannot reach, and a connection that broke.
_UNREACHABLE_SIGNS = (
    "HTTPConnectionPool",
    "HTTPSConnectionPool",
    "Connection refused",
    "Max retries",
)
_CUT_SIGNS = ("Connection aborted", "Connection broken", "Connection reset", "Stream failed")


# Server errors that say the store cannot run a statement now (its time, its load, its disk, its
# replication), not that the statement or its data is wrong: the same statement may succeed
# later, and an insert may even have been done (UNKNOWN_STATUS_OF_INSERT, a timeout after the
# write). By code, which the driver carries even when it hides the server's words.
_NOT_REFUSALS = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE: the request was cut on its way
        159,  # TIMEOUT_EXCEEDED
        160,  # TOO_SLOW
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        999,  # KEEPER_EXCEPTION
    }
)


def refused_by_store(exc: BaseException) -> bool:
    """Whether a driver error is the store's answer refusing the statement (it was not done).

    A transport error (no answer, a timeout, a connection cut after the request went) carries
    no server code: its outcome is unknown. A server error about the store's own condition
    (`_NOT_REFUSALS`) is no refusal of the statement either.
    """
    code = getattr(exc, "code", None)
    return isinstance(code, int) and code > 0 and code not in _NOT_REFUSALS


def driver_errors() -> tuple[type[BaseException], ...]:
    """What the drivers raise for a store problem; anything else is a bug of ours."""
    # Deferred: importing clickhouse_connect loads the engine's driver (half a second).
    from clickhouse_connect.driver.exceptions import ClickHouseError, StreamCompleteException

    return (ClickHouseError, StreamCompleteException, OSError)
