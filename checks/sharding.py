"""A `Distributed` table's layout, read from its engine: its cluster, the table on each shard,
and whether its rows are sharded by session, so that a session scan can run whole on each shard
(docs/architecture.md#aggregation-where-the-data-lives).
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.core.store import Store


@dataclass(frozen=True)
class Sharding:
    """A `Distributed` table's layout: its cluster, the table on each shard, and whether its
    rows are sharded by session (`cityHash64(session_id)`: a session's events on one shard)."""

    cluster: str
    local: str  # database.table on each shard
    by_session: bool


# The key that puts a session's events on one shard (the narrow table's and the state's).
BY_SESSION = "cityHash64(session_id)"


def engine_arguments(engine_full: str) -> list[str]:
    """The top-level arguments of an engine clause (`Distributed('c', 'db', 't', key)`),
    string literals unquoted, expressions as written."""
    start = engine_full.find("(")
    args: list[str] = []
    current, depth, quote = "", 0, ""
    for ch in engine_full[start + 1 :] if start >= 0 else "":
        if quote:
            if ch == quote and not current.endswith("\\"):
                quote = ""
            current += ch
        elif ch == "'":
            quote = ch
            current += ch
        elif ch == "(":
            depth += 1
            current += ch
        elif ch == ")" and depth == 0:
            break
        elif ch == ")":
            depth -= 1
            current += ch
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    args.append(current.strip())
    return [a[1:-1] if len(a) > 1 and a[0] == a[-1] == "'" else a for a in args if a]


def sharding_of(store: Store, table: str) -> Sharding | None:
    """How `table` is sharded, when it is a `Distributed` table (None otherwise)."""
    facts = store.table_facts(table, "engine, engine_full")
    if not facts or facts[0] != "Distributed":
        return None
    database = table.rpartition(".")[0]
    args = engine_arguments(facts[1])
    if len(args) < 3:
        return None
    cluster, local_db, local = args[:3]
    key = "".join(args[3].split()) if len(args) > 3 else ""
    local_db = local_db or database or store.current_database()
    return Sharding(cluster, f"{local_db}.{local}", key == BY_SESSION)
