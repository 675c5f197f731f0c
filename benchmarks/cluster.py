"""What the initiator of a cluster receives per run: the benchmark's table read through a real
`Distributed` table over 2 local shards (tests/cluster.py), and the narrow table and session
state built on that cluster by `schema apply --materialize`'s statements, shard by shard.

For each scan of a whole `check --format json` run (`run_once` with triage), the rows and
bytes the shards send are measured the way ClickHouse sends them: the scan's distributed part
run with `distributed_group_by_no_merge = 1`, so that each shard's finished part reaches the
initiator as it is and is counted there (`count()`, `byteSize`: the finalized values; a
`uniqExact` state would be larger, none is sent). Next to them, what the shape measured before
this round sent: every event of the lookback, its normalized columns
(docs/performance.md#at-a-billion-events-a-day-on-a-cluster).

    python -m benchmarks.cluster --events 5000000 --mix lean
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.generate import DEFAULT_AT, MIXES, generate, row_count, table_name
from benchmarks.guard import exit_code, refuse_errors
from checks.builtin import configured_checks
from checks.kinds import kind_of, session_scopes
from checks.kinds.deviation_contract import DeviationContract, classified
from checks.materialize import materialize_statements, plan_for, replacing_of
from checks.scans.binder import merged
from checks.scans.plans import Context, Plans, session_sql
from checks.scans.row import aggregates
from checks.sources import CompiledSource, open_source
from checks.triage import plain
from tests.cluster import distribute, engine_config, respread, shard_by_shard
from watchdog.core.settings import Settings, settings_from_mapping
from watchdog.core.store import Store, open_store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

NO_MERGE = {"distributed_group_by_no_merge": 1}


def _received(store: Store, sql: str, params: dict[str, Any]) -> dict[str, int]:
    """Rows and bytes the shards send for the distributed part `sql`, counted on arrival."""
    row = store.query(
        f"SELECT count() AS n, sum(byteSize(*)) AS b FROM ({sql})",
        params,
        extra_settings=NO_MERGE,
    ).first()
    return {"rows": int(row["n"]), "bytes": int(row["b"] or 0)}


def _scans(store: Store, settings: Settings) -> dict[str, dict[str, int]]:
    """What each scan of a run on `settings`' source makes the shards send."""
    specs = configured_checks(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    window = window_at(settings, DEFAULT_AT)
    plans = Plans(source, dims=tuple(plain(source.dims)))
    for spec in specs:
        kind_of(spec).plan(plans, spec)
    ctx = Context(store, source, window)
    found: dict[str, dict[str, int]] = {}
    for length, scan in plans.sessions.items():
        name = f"session scan{'' if length is None else f' ({length} ms)'}"
        if source.state or source.on_shards() is not None:
            # Judged whole on each shard: the shards send their per-check totals.
            sql, params = session_sql(ctx, scan)
        else:
            needs = scan.needs()
            terms = scan.terms(needs)
            sql = source.select(
                f"session_id, {aggregates(terms)}",
                group="session_id",
                dims=bool(needs.dims),
                terms=terms.items(),
            )
            params = scan.params()
        found[name] = _received(store, sql, ctx._bound(params))
    events = source.events_source
    for length, window_scan in plans.windows.items():
        per_event = ",\n      ".join(window_scan.per_event)
        sql = events.select(
            f"event_id, {per_event}",
            where="name IN {window_names:Array(String)} AND t >= {ws_ms:Int64}",
            group="event_id",
            dims=window_scan.dims is not None,
        )
        name = f"window scan{'' if length is None else f' ({length} ms)'}"
        found[name] = _received(
            store, sql, Context(store, events, window)._bound(window_scan.params())
        )
    contract = next(s for s in specs if s.id == "agent_deviation_contract").params
    assert isinstance(contract, DeviationContract)
    deviations = classified(events, tuple(plain(events.dims)))
    found["deviation contract"] = _received(
        store, deviations, Context(store, events, window)._bound(contract.params())
    )
    return found


def _everything(store: Store, source: CompiledSource, settings: Settings) -> dict[str, int]:
    """What every event of the lookback costs to send: the shape measured before this round."""
    window = window_at(settings, DEFAULT_AT)
    row = store.query(
        "SELECT count() AS n, sum(byteSize(event_id, ts, session_id, name, latency_ms, payload,"
        " in_scope, latency_invalid, payload_is_object, payload_is_utf8)) AS b"
        f" FROM {source.events()}",
        merged(source.params, window.params()),
    ).first()
    return {"rows": int(row["n"]), "bytes": int(row["b"] or 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--mix", choices=MIXES, default="lean")
    parser.add_argument("--dir", default="/tmp/memory-watchdog-bench-cluster")
    parser.add_argument("--output", default="", help="write the results as JSON here too")
    args = parser.parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    config = engine_config(Path(tempfile.mkdtemp()))
    results: dict[str, Any] = {"events": args.events, "mix": args.mix, "shards": 2}
    with open_store(
        f"chdb://{directory}", create=True, engine_config=config, query_timeout_s=3600
    ) as store:
        table = table_name("joelclaw", args.events, 0, mix=args.mix)
        store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
        if row_count(store, table) != args.events:
            print(f"generating {table} ...", file=sys.stderr)
            generate(store, "joelclaw", table, args.events, seed=0, at=DEFAULT_AT, mix=args.mix)
        raw = settings_from_mapping({"source": {"table": table}}, plugins=PLUGINS, env={})
        spread = distribute(store, table, "two", "rand()", "cityHash64(id, received_at)")
        on_cluster = settings_from_mapping(
            {"source": {"table": spread.table}}, plugins=PLUGINS, env={}
        )
        source = open_source(store, on_cluster.source)
        results["before (every event of the lookback)"] = _everything(store, source, on_cluster)
        results["raw table, rows spread by rand()"] = _scans(store, on_cluster)
        database = f"bench_cluster_{uuid.uuid4().hex[:6]}"
        clustered = settings_from_mapping(
            {"source": {"table": table}, "store": {"cluster": "two"}}, plugins=PLUGINS, env={}
        )
        print("building the narrow table and the state on the cluster ...", file=sys.stderr)
        started = time.perf_counter()
        statements = materialize_statements(
            clustered,
            plan_for(clustered, ttl=None, database=database),
            store.table_columns(table),
            configured_checks(clustered),
            since=DEFAULT_AT - timedelta(days=2),
            until=DEFAULT_AT + timedelta(days=1),
            replacing=replacing_of(store, table),
        )
        shard_by_shard(store, [(s.sql, dict(s.params)) for s in statements])
        for name in ("memory_events", "session_state"):
            respread(
                store,
                f"{database}.{name}",
                f"{database}.{name}_local",
                "two",
                "cityHash64(session_id)",
            )
        results["built_s"] = round(time.perf_counter() - started, 1)
        state = settings_from_mapping(
            {"source": {"table": table, "state": f"{database}.session_state"}},
            plugins=PLUGINS,
            env={},
        )
        narrow = settings_from_mapping(
            {"source": {"preset": "normalized", "table": f"{database}.memory_events"}},
            plugins=PLUGINS,
            env={},
        )
        results["narrow table, sharded by session"] = _scans(store, narrow)
        results["session state, sharded by session"] = _scans(store, state)
        # The verdicts on the cluster are the single table's (tests/test_cluster.py holds it).
        single = run_once(store, raw, window_at(raw, DEFAULT_AT)).to_json()["checks"]
        refuse_errors(f"{table}: the single table's run", single)
        for label, settings in (("raw", on_cluster), ("state", state)):
            checks = run_once(store, settings, window_at(settings, DEFAULT_AT)).to_json()["checks"]
            refuse_errors(f"{table}: the {label} run on the cluster", checks)
            results[f"{label} verdicts as the single table's"] = checks == single
        store.command(f"DROP DATABASE IF EXISTS {database}")
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(exit_code(main))
