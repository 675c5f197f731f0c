"""The floor: one scan of the lookback extracting the session id, on the compiled source.

`python -m benchmarks.floor STORE_URL CONFIG AT` runs it as a process of its own (what the
benchmark times against the user paths): load the config, open the store, compile the source,
run the query once. Imports only what the CLI imports
(docs/performance.md#how-the-benchmark-measures).
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from checks.sources import open_source
from watchdog.core.settings import Settings, load_settings
from watchdog.core.store import Store, open_store
from watchdog.runner.once import window_at
from watchdog.runner.plugins import PLUGINS


# joelclaw's session id read on its own, each key with JSONExtractString (which stops at the
# key; invalid UTF-8 read again repaired), as the source read it before the scans parsed every
# field in one JSONExtract: the floor is the cheapest reading of the session id, and must not
# grow dearer with the scans' own choices (the tuple that serves them costs the floor 1.4x).
def _key(key: str) -> str:
    return (
        f"if(isValidUTF8(metadata_json), JSONExtractString(metadata_json, '{key}'),"
        f" JSONExtractString(toValidUTF8(metadata_json), '{key}'))"
    )


_JOELCLAW_SESSION = (
    f"multiIf({_key('session_id')} != '', {_key('session_id')},"
    f" {_key('sessionId')} != '', {_key('sessionId')}, ifNull(sessionId, ''))"
)


def floor_sql(store: Store, settings: Settings) -> tuple[str, dict[str, Any]]:
    """The floor query: one scan extracting the session id, on the same compiled source."""
    source = open_source(store, settings.source)
    if source.preset == "joelclaw" and "session_id" not in settings.source.columns:
        sql = (
            f"SELECT uniqExact(if(s IN {{ignore_sessions:Array(String)}}, '', s)) AS sessions"
            f" FROM (SELECT {_JOELCLAW_SESSION} AS s FROM {source.table}"
            f" WHERE timestamp >= fromUnixTimestamp64Milli({{lb_ms:Int64}}, 'UTC')"
            f" AND timestamp < fromUnixTimestamp64Milli({{at_ms:Int64}}, 'UTC'))"
        )
        return sql, dict(source.params)
    return f"SELECT uniqExact(session_id) AS sessions FROM {source.events()}", dict(source.params)


def main(argv: list[str]) -> int:
    url, config, at = argv
    settings = load_settings(config, plugins=PLUGINS, env={})
    window = window_at(settings, datetime.fromisoformat(at))
    with open_store(url, query_timeout_s=3600) as store:
        sql, params = floor_sql(store, settings)
        store.query(sql, {**params, **window.params()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
