"""A real ClickHouse cluster of local shards, in the tests' own engine: ClickHouse's distributed
query engine over 2 or 3 shards that are the embedded engine itself
(../shared/reference/clickhouse-notes.md, "A real ClickHouse cluster, in-process").

The tests' store is opened with `ENGINE_CONFIG` (tests/conftest.py), which
names the clusters `two` and `three`. One local table holds every row; each
shard reads its own slice through a view keeping the rows whose sharding key
belongs to it, and a `Distributed` table over that view is what the
watchdog reads. `ON CLUSTER` needs Keeper, which the embedded engine lacks:
`shard_by_shard` runs a cluster's statements once, as each shard would
(every shard is this engine), without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from watchdog.core.store import Store

CLUSTERS = {"two": 2, "three": 3}
_HOSTS = ("localhost", "127.0.0.1", "localhost")  # each local: is_local = 1 in system.clusters


def engine_config(directory: Path) -> Path:
    """The engine config naming the clusters of local shards; written into `directory`."""
    clusters = "".join(
        f"<{name}>"
        + "".join(
            f"<shard><replica><host>{_HOSTS[i]}</host><port>9000</port></replica></shard>"
            for i in range(shards)
        )
        + f"</{name}>"
        for name, shards in CLUSTERS.items()
    )
    path = directory / "cluster.xml"
    path.write_text(
        "<clickhouse><tcp_port>9000</tcp_port>"
        f"<remote_servers>{clusters}</remote_servers></clickhouse>\n"
    )
    return path


@dataclass(frozen=True)
class Sharded:
    """A `Distributed` table over a local one, its rows spread by `rows_by` (SQL over a row)."""

    table: str  # what the watchdog reads
    local: str  # where every row is
    cluster: str


def distribute(
    store: Store, local: str, cluster: str, key: str, rows_by: str | None = None, name: str = ""
) -> Sharded:
    """A Distributed table (`name`, default `<local>_dist`) over `local` on `cluster`.

    `key` is the sharding key the table declares; `rows_by` the expression
    that spreads the rows the tests wrote (default: `key`), since the rows
    are in one table already: `rand()` is declared, a hash of the whole row
    spreads them (copies of one event may then lie on different shards, as
    they do behind `rand()`).
    """
    database = local.rpartition(".")[0]
    view = f"{local}_shard_{cluster}"
    spread = rows_by or key
    store.command(
        f"CREATE VIEW IF NOT EXISTS {view} AS SELECT * FROM {local}"
        f" WHERE shardCount() = 0 OR ({spread}) % greatest(shardCount(), 1) = shardNum() - 1"
    )
    dist = name or f"{local}_{cluster}"
    store.command(
        f"CREATE TABLE IF NOT EXISTS {dist} AS {local}"
        f" ENGINE = Distributed('{cluster}', '{database}', '{view.split('.')[-1]}', {key})"
    )
    return Sharded(dist, local, cluster)


def shard_by_shard(store: Store, statements: Iterable[tuple[str, dict[str, object]]]) -> None:
    """Run a cluster's DDL as each shard would, without `ON CLUSTER` (no Keeper here) and with
    the replicated engines as their plain ones (no replicas either): every shard is this one
    engine, so once is each shard's."""
    for sql, params in statements:
        local = re.sub(r" ON CLUSTER \w+", "", sql)
        local = re.sub(r"Replicated(\w*MergeTree)\('[^']*', '[^']*'\)", r"\1", local)
        store.command(local, params)


def respread(store: Store, distributed: str, local: str, cluster: str, by: str) -> None:
    """Point the Distributed table `distributed` at `local` through a per-shard view spreading
    its rows by `by`: what the materialize statements' tables hold on each shard."""
    database, _, name = local.rpartition(".")
    view = f"{local}_shard"
    computed = store.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String}"
        " AND default_kind = 'MATERIALIZED'",
        {"db": database, "t": name},
    ).rows
    columns = "".join(f", {row[0]}" for row in computed)  # `*` leaves them out
    store.command(
        f"CREATE VIEW IF NOT EXISTS {view} AS SELECT *{columns} FROM {local}"
        f" WHERE shardCount() = 0 OR ({by}) % greatest(shardCount(), 1) = shardNum() - 1"
    )
    engine = store.query(
        "SELECT create_table_query FROM system.tables WHERE database = {db:String}"
        " AND name = {t:String}",
        {"db": distributed.rpartition(".")[0], "t": distributed.rpartition(".")[2]},
    ).rows[0][0]
    comment = re.search(r"COMMENT ('(?:[^'\\]|\\.)*')", str(engine))
    store.command(f"DROP TABLE {distributed}")
    store.command(
        f"CREATE TABLE {distributed} AS {local} ENGINE = Distributed('{cluster}', '{database}',"
        f" '{view.split('.')[-1]}', cityHash64(session_id))"
        + (f" COMMENT {comment.group(1)}" if comment else "")
    )
