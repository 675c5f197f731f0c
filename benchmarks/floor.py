"""The floor: one scan of the lookback extracting the session id, on the compiled source.

`python -m benchmarks.floor STORE_URL CONFIG AT` runs it as a process of its own
(what the benchmark times against the user paths): load the config, open the
store, compile the source, run the query once. Imports only what the CLI imports.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from checks.sources import open_source
from watchdog.core.settings import Settings, load_settings
from watchdog.core.store import Store, open_store
from watchdog.runner.once import window_at


def floor_sql(store: Store, settings: Settings) -> tuple[str, dict[str, Any]]:
    """The floor query: one scan extracting the session id, on the same compiled source."""
    source = open_source(store, settings.source)
    return f"SELECT uniqExact(session_id) AS sessions FROM {source.events()}", dict(source.params)


def main(argv: list[str]) -> int:
    url, config, at = argv
    settings = load_settings(config, env={})
    window = window_at(settings, datetime.fromisoformat(at))
    with open_store(url, query_timeout_s=3600) as store:
        sql, params = floor_sql(store, settings)
        store.query(sql, {**params, **window.params()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
