"""A tick that delivers never holds the store's turn: the receiver's loads go on meanwhile.

A real `memory-watchdog daemon --otlp` on its embedded store, whose first
run judges one window and fires an alert to a webhook that trickles its
answer (a byte every 2s, never complete): the delivery lasts until
`alerts.delivery_timeout` (60s). Records posted while it lasts are loaded
(the `/metrics` loaded counter) before it ends: before the daemon logs the
window as judged, which it does once the run's delivery is over. On the
code before, the tick held the turn until its child exited, so every load
waited for the delivery's end (and came after that line).

The same holds on a ClickHouse server store (here the test's stand-in of
one, over the test session's engine), which needs no turn at all: there
the tick took the turn for its whole run, delivery included.
"""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Callable
from pathlib import Path

import clickhouse_connect
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.alerts.http_standin import OK, WebhookStandIn, trickle
from tests.faults.chserver import ClickHouseHTTPServer
from tests.ingest.processes import Daemon, clean_env, free_port, post_logs, records_request

pytestmark = pytest.mark.slow

CONFIG = """
[schedule]
every = "1h"

[store]
lock_timeout = "60s"

[ingest]
listen = "127.0.0.1:{port}"
load_every = "250ms"

[alerts]
delivery_timeout = "60s"

[alerts.webhook.team]
url = "{url}"
timeout = "60s"
"""

RECORDS = 50
JUDGED = re.compile(r" (judged|caught up) \[")  # said once the run's delivery is over


def judged(daemon: Daemon) -> list[str]:
    return [line for line in list(daemon.lines) if JUDGED.search(line)]


def loaded_logs(web: int) -> float:
    """The `/metrics` counter of log records loaded into the store."""
    connection = http.client.HTTPConnection("127.0.0.1", web, timeout=30)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    return next(
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "memory_watchdog_ingest_records_total"
        and sample.labels == {"signal": "logs", "outcome": "loaded"}
    )


def wait_for(found: Callable[[], bool], daemon: Daemon, what: str, seconds: float = 180) -> None:
    """Until `found` holds, the daemon alive (generously bounded: a condition, not a time)."""
    deadline = time.monotonic() + seconds
    while not found():
        assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()
        assert time.monotonic() < deadline, f"{what} never happened: " + daemon.log()
        time.sleep(0.05)


def test_records_posted_while_a_tick_delivers_are_loaded_before_the_delivery_ends(
    tmp_path: Path,
) -> None:
    """While a run delivers to a webhook trickling its answer, OTLP loads go on: what is posted
    during the delivery is in the store before the delivery ends (delivery is off the turn)."""
    loads_go_on_while_delivering(tmp_path, ())


def test_on_a_server_store_records_posted_while_a_tick_delivers_are_loaded_meanwhile(
    tmp_path: Path, store_url: str
) -> None:
    """The same on a ClickHouse server store, where a tick holds the store open while it
    delivers (its alert lease is renewed there) and loads need no turn."""
    client = clickhouse_connect.get_client(dsn=store_url)
    try:
        client.command("CREATE DATABASE IF NOT EXISTS delivery_off_turn")
        with ClickHouseHTTPServer(client, users={"default": "secret"}) as server:
            store = server.url(database="delivery_off_turn")
            loads_go_on_while_delivering(tmp_path, ("--store", store))
    finally:
        client.close()


def loads_go_on_while_delivering(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A daemon (`args` added to its command line) whose first run's alert trickles: records
    posted meanwhile are loaded before the run is said judged."""
    port, web = free_port(), free_port()
    with WebhookStandIn(default=trickle(2.0, 100_000)) as hook:
        config = tmp_path / "watchdog.toml"
        config.write_text(CONFIG.format(port=port, url=hook.url), encoding="utf-8")
        daemon = Daemon(
            clean_env(tmp_path / "xdg"),
            port,
            ("--config", str(config), "--http", f"127.0.0.1:{web}", *args),
            flag=False,
        )
        daemon.start()
        try:
            daemon.wait_receiving()
            wait_for(lambda: bool(hook.requests), daemon, "a delivery to the webhook")
            assert post_logs(port, records_request(1, 0, RECORDS)) == 200
            loaded = 0.0

            def loaded_or_over() -> bool:
                nonlocal loaded
                loaded = loaded_logs(web)  # read first: a load seen before the end is checked
                return loaded >= RECORDS or bool(judged(daemon))

            wait_for(loaded_or_over, daemon, "a load or the delivery's end")
            assert loaded == RECORDS and judged(daemon) == [], daemon.log()
            [sending] = hook.requests  # one message, its answer still trickling
            assert sending.status == 0
            # The answer ends unfinished and the retry is answered at once: the run finishes,
            # the daemon can stop (closing the stand-in instead left three retries refused,
            # their backoff 4-5 s of waiting).
            hook.reply(OK)
            hook.closed.set()
            assert daemon.stop() == 0, daemon.log()
        finally:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.kill()
    assert len(judged(daemon)) == 1, daemon.log()  # the one window, said after its delivery
