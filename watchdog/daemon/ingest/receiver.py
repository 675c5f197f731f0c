"""What OTLP/HTTP and OTLP/gRPC share: the token, admission, the limits, decoding and the spool.

`Receiver.accept` takes one export request's body (decompressed) and returns
its batch once the batch is durable in the spool
(watchdog.daemon.ingest.spool), or raises `Refused` with the HTTP status
that says why (docs/start-without-clickhouse.md#answers-limits-and-backpressure);
OTLP/gRPC maps each status to its code (watchdog.daemon.ingest.otlp_grpc).
What one request may make the daemon hold is bounded before anything is
built: the records are counted on the bytes (watchdog.daemon.ingest.wire),
and the bodies decoded at once add up to at most `max_body` (one body alone
may be that large), so a burst of large or hostile requests waits its turn
instead of taking the memory.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from watchdog.core.settings.ingest import IngestSettings
from watchdog.daemon.ingest.otlp import (
    PROTOBUF,
    SIGNALS,
    BadRequest,
    Batch,
    Signal,
    count_records,
    decode,
    new_request,
    to_batch,
)
from watchdog.daemon.ingest.spool import IngestSpool
from watchdog.daemon.ingest.wire import (
    Malformed,
    TooMany,
    json_containers,
    protobuf_messages,
    protobuf_records,
)

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # short: the SDK exporters give up once their timeout (10s) would pass


@dataclass(frozen=True)
class Refusal:
    """Why a request is turned away for now (429 or 503), and for how long."""

    status: int
    message: str
    retry_after_s: int = RETRY_AFTER_S


class Refused(Exception):
    """Answer the request with this HTTP status (OTLP/gRPC maps it to a code) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    @property
    def retry_after_s(self) -> int | None:
        """Seconds the client should wait before sending the same request again (429, 503)."""
        return RETRY_AFTER_S if self.status in (429, 503) else None


@dataclass
class Counts:
    """What the receiver did, for /metrics and the log (updated under `lock`)."""

    accepted: dict[Signal, int]
    rejected: dict[Signal, int]
    retried: dict[Signal, int]  # requests whose records were already kept: stored once
    refused: dict[int, int]  # requests answered with an error, by HTTP status
    lock: threading.Lock

    @classmethod
    def zero(cls) -> Counts:
        zero = dict.fromkeys(SIGNALS, 0)
        return cls(dict(zero), dict(zero), dict(zero), {}, threading.Lock())

    def refuse(self, status: int) -> None:
        with self.lock:
            self.refused[status] = self.refused.get(status, 0) + 1


class DecodeBudget:
    """Bytes of request bodies being decoded at once: at most `limit`, or one body alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_use = 0
        self._changed = threading.Condition()
        self.waiting = 0  # callers of `held` waiting for room now
        self.peak = 0  # the most bytes held at once so far

    @contextmanager
    def held(self, size: int) -> Iterator[None]:
        """Hold `size` bytes of the budget, once there is room (or nothing else is held)."""
        with self._changed:
            self.waiting += 1
            try:
                self._changed.wait_for(
                    lambda: self._in_use == 0 or self._in_use + size <= self.limit
                )
            finally:
                self.waiting -= 1
            self._in_use += size
            self.peak = max(self.peak, self._in_use)
        try:
            yield
        finally:
            with self._changed:
                self._in_use -= size
                self._changed.notify_all()


class Receiver:
    """Accepts OTLP export requests into the spool; `admission` says whether to take more now."""

    def __init__(
        self,
        settings: IngestSettings,
        spool: IngestSpool,
        *,
        admission: Callable[[], Refusal | None],
    ) -> None:
        self.settings = settings
        self.spool = spool
        self.admission = admission
        self.counts = Counts.zero()
        self._token = settings.token_value.encode()
        self.budget = DecodeBudget(settings.max_body)
        self._said = ""  # the spool problem logged last

    def check_token(self, authorization: str | None) -> None:
        """Refused (401) unless `Bearer <token>` carries the token, when one is configured."""
        if self._token and not _bearer_ok(authorization, self._token):
            raise Refused(401, "missing or wrong bearer token")

    def admit(self) -> None:
        """Refused (429 or 503) while the receiver takes nothing more."""
        refusal = self.admission()
        if refusal is not None:
            raise Refused(refusal.status, refusal.message)

    def accept(self, signal: Signal, body: bytes, content_type: str) -> Batch:
        """Count, decode, map and spool one request's body; its batch once it is durable."""
        if len(body) > self.settings.max_body:
            raise Refused(413, f"body of {len(body)} bytes; the limit is {self.settings.max_body}")
        with self.budget.held(len(body)):
            request = self._decode(signal, body, content_type)
            batch = to_batch(signal, request)
            del request
        fresh = False
        if batch.rows:
            try:
                fresh = self.spool.put(batch)
            except OSError as exc:
                if exc.strerror != self._said:  # once per problem, not once per request
                    log.error("ingest: cannot write the spool (%s); answering 503", exc.strerror)
                self._said = exc.strerror or ""
                raise Refused(503, "the receiver cannot keep the records now") from None
            self._said = ""
        with self.counts.lock:
            self.counts.accepted[signal] += batch.rows if fresh else 0
            self.counts.retried[signal] += 1 if batch.rows and not fresh else 0
            self.counts.rejected[signal] += batch.rejected
        return batch

    def _decode(self, signal: Signal, body: bytes, content_type: str) -> object:
        """The request message; Refused 400 when malformed, 413 past `max_records`."""
        limit = self.settings.max_records
        try:
            if content_type == PROTOBUF:
                protobuf_records(body, limit)
                protobuf_messages(body, new_request(signal).DESCRIPTOR, limit)
            else:
                json_containers(body, limit)
            request = decode(signal, body, content_type)
        except TooMany as exc:
            raise Refused(413, str(exc)) from None
        except Malformed as exc:
            name = type(new_request(signal)).__name__
            raise Refused(400, f"not a protobuf {name}: {exc}") from None
        except BadRequest as exc:
            raise Refused(400, str(exc)[:300]) from None
        records = count_records(signal, request)
        if records > limit:  # a JSON request: counted once read, before anything is stored
            raise Refused(413, f"{records} records in one request; the limit is {limit}")
        return request


def _bearer_ok(header: str | None, token: bytes) -> bool:
    """Whether `Authorization: Bearer <token>` carries the token (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)
