"""A retry is recognised for the store and table its records went to, never for another one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ingest.conftest import Receiving
from tests.ingest.processes import Client, Daemon, clean_env, free_port, query
from tests.ingest.test_receiver import logs_request, post
from watchdog.core.store import Store


def count(store: Store, table: str) -> int:
    return int(store.query(f"SELECT count() FROM {table}").rows[0][0])


def test_the_same_batch_to_two_tables_sharing_a_spool_is_stored_in_each(
    store: Store, receiving: Callable[..., Receiving], tmp_path: Path
) -> None:
    """Two receivers writing two tables from one spool directory: the batch one loaded is new to
    the other, which stores it; what one accepted and has not loaded the other never loads."""
    shared = str(tmp_path / "one-spool")
    first = receiving(spool_dir=shared)
    body = logs_request(3)
    assert post(first.endpoint, body).status == 200
    first.load()
    second = receiving(spool_dir=shared)  # started after the first loaded the batch
    assert post(second.endpoint, body).status == 200
    second.load()
    assert (count(store, first.logs_table), count(store, second.logs_table)) == (3, 3)
    waiting = logs_request(5)  # accepted by the first, loaded by it alone
    assert post(first.endpoint, waiting).status == 200
    second.load()
    assert count(store, second.logs_table) == 3
    first.load()
    assert count(store, first.logs_table) == 3 + 5
    assert second.ingest.receiver.counts.retried["logs"] == 0


CONFIG = '[ingest]\nload_every = "250ms"\n'


@pytest.mark.slow
def test_the_same_batch_to_daemons_on_two_stores_with_one_data_directory_is_in_each(
    tmp_path: Path,
) -> None:
    """The same request sent to a daemon on store A, then within the retry window to a daemon on
    store B sharing its data directory (and so its spool): each store holds the records once."""
    env = clean_env(tmp_path / "xdg")  # one data directory, one spool
    config = tmp_path / "watchdog.toml"
    config.write_text(CONFIG, encoding="utf-8")
    stores = [f"chdb://{tmp_path / name}" for name in ("store-a", "store-b")]
    for url in stores:
        daemon = Daemon(env, free_port(), ("--config", str(config), "--store", url))
        daemon.start()
        daemon.wait_receiving()
        client = Client(7, daemon.port, requests=1, records=4)
        client.run(deadline=float("inf"))
        assert len(client.acknowledged) == 4
        assert daemon.stop() == 0, daemon.log()
    for url in stores:
        rows = query(url, "SELECT LogAttributes['record.id'] FROM otel.otel_logs ORDER BY 1", env)
        assert [row[0] for row in rows] == [f"7-0-{k}" for k in range(4)], url
