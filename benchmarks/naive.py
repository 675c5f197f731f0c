"""The obvious alternative a user might script: pull the rows into pandas, judge in Python.

It reads the lookback's raw rows of the source table, parses each event's
attributes in Python, counts every event id once, and computes six of the
eleven checks with the rules of docs/spec.md sections 4-5: recall_coverage, the two
failure rates, the recall p95, write_gate_drift and telemetry_freshness.
The benchmark compares its values with the suite's, so the speed-up it
reports is between two programs that agree.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from checks.base import Window
from watchdog.core.settings import Settings

RECALL_ANY = "recall_any"


def _rows_joelclaw(client: Any, table: str, params: dict[str, Any]) -> pd.DataFrame:
    df = client.query_df(
        "SELECT id, timestamp, sessionId, action, duration_ms, metadata_json FROM "
        + table
        + " WHERE timestamp >= fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
        " AND timestamp < fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC')",
        parameters=params,
    )
    df = df.drop_duplicates("id")
    metas = [json.loads(text) if text.startswith("{") else {} for text in df["metadata_json"]]

    def session(meta: dict[str, Any], column: Any) -> str:
        for key in ("session_id", "sessionId"):
            value = meta.get(key)
            if isinstance(value, str) and value:
                return value
        return column if isinstance(column, str) else ""

    latency = [
        m.get("latency_ms") if m.get("latency_ms") is not None else d
        for m, d in zip(metas, df["duration_ms"], strict=True)
    ]
    return pd.DataFrame(
        {
            "event_id": df["id"].to_numpy(),
            "t": _epoch_ms(df["timestamp"]),
            "session_id": [session(m, c) for m, c in zip(metas, df["sessionId"], strict=True)],
            "name": df["action"].to_numpy(),
            "latency_ms": pd.to_numeric(pd.Series(latency), errors="coerce").to_numpy(),
            "result_count": [m.get("result_count") for m in metas],
            "verdict": [m.get("verdict") for m in metas],
        }
    )


def _rows_otel_logs(client: Any, table: str, params: dict[str, Any]) -> pd.DataFrame:
    df = client.query_df(
        "SELECT Timestamp, EventName, LogAttributes, ResourceAttributes['session.id'] AS rsid"
        " FROM " + table + " WHERE Timestamp >= fromUnixTimestamp64Milli({lb_ms:Int64}, 'UTC')"
        " AND Timestamp < fromUnixTimestamp64Milli({at_ms:Int64}, 'UTC')",
        parameters=params,
    )
    attrs = list(df["LogAttributes"])
    ids = [a.get("event.id") or f"row-{i}" for i, a in enumerate(attrs)]
    frame = pd.DataFrame(
        {
            "event_id": ids,
            "t": _epoch_ms(df["Timestamp"]),
            "session_id": [
                a.get("session.id") or r or "" for a, r in zip(attrs, df["rsid"], strict=True)
            ],
            "name": [
                n or a.get("event.name", "") for n, a in zip(df["EventName"], attrs, strict=True)
            ],
            "latency_ms": pd.to_numeric(
                pd.Series([a.get("latency_ms") or a.get("duration_ms") for a in attrs]),
                errors="coerce",
            ).to_numpy(),
            "result_count": [a.get("result_count") for a in attrs],
            "verdict": [a.get("verdict") for a in attrs],
        }
    )
    return frame.drop_duplicates("event_id")


def _epoch_ms(column: pd.Series) -> Any:
    """Epoch milliseconds, whatever resolution pandas chose for the datetimes."""
    epoch = pd.Timestamp(0, tz="UTC")
    return ((pd.to_datetime(column, utc=True) - epoch) // pd.Timedelta(milliseconds=1)).to_numpy()


def load(client: Any, preset: str, table: str, window: Window) -> pd.DataFrame:
    """The lookback's events as a DataFrame of normalized columns, one row per event id."""
    params = window.params()
    if preset == "joelclaw":
        return _rows_joelclaw(client, table, params)
    if preset == "otel_logs":
        return _rows_otel_logs(client, table, params)
    raise ValueError(f"the naive script knows joelclaw and otel_logs, not {preset}")


def _lost(
    df: pd.DataFrame,
    started: tuple[str, ...],
    outcomes: tuple[str, ...],
    grace: int,
    ws: int,
    at: int,
) -> int:
    """Started events of real sessions, due in W, with no outcome in [t, t + grace]."""
    starts = df[df["name"].isin(started) & (df["session_id"] != "")]
    starts = starts.drop_duplicates(["t", "event_id"])
    starts = starts[(starts["t"] + grace >= ws) & (starts["t"] + grace < at)]
    done = df[df["name"].isin(outcomes) & (df["session_id"] != "")][["session_id", "t"]]
    if starts.empty:
        return 0
    if done.empty:
        return len(starts)
    merged = pd.merge_asof(
        starts.sort_values("t")[["session_id", "t"]],
        done.sort_values("t").rename(columns={"t": "outcome_t"}),
        left_on="t",
        right_on="outcome_t",
        by="session_id",
        direction="forward",
    )
    met = merged["outcome_t"].notna() & (merged["outcome_t"] <= merged["t"] + grace)
    return int((~met).sum())


def evaluate(
    client: Any, preset: str, table: str, settings: Settings, window: Window
) -> dict[str, Any]:
    """Six checks' values computed in Python from the raw rows; keys are check ids."""
    p = window.params()
    ws, at = p["ws_ms"], p["at_ms"]
    ev, w = settings.events, settings.window
    df = load(client, preset, table, window)
    ignore = set(settings.source.ignore_sessions)
    df["session_id"] = [("" if s in ignore else s) for s in df["session_id"]]
    in_w = df["t"] >= ws
    values: dict[str, Any] = {}

    # recall_coverage: sessions whose first recall-grace closes in W without a recall.
    recall_grace = int(w.recall_grace.total_seconds() * 1000)
    real = df[df["session_id"] != ""]
    first = real.groupby("session_id")["t"].min()
    due = first[(first + recall_grace >= ws) & (first + recall_grace < at)]
    recalls = real[real["name"].isin(ev.recall_any)][["session_id", "t"]]
    joined = recalls.join(due.rename("first"), on="session_id", how="inner")
    met = joined[(joined["t"] >= joined["first"]) & (joined["t"] <= joined["first"] + recall_grace)]
    values["recall_coverage"] = int(len(due) - met["session_id"].nunique())

    for check, started, completed, failed, grace in (
        (
            "recall_failure_rate",
            ev.recall_started,
            ev.recall_completed,
            ev.recall_failed,
            w.recall_grace,
        ),
        (
            "observe_failure_rate",
            ev.observe_requested,
            ev.observe_completed,
            ev.observe_failed,
            w.observe_grace,
        ),
    ):
        n_completed = int(df[in_w & df["name"].isin(completed)]["event_id"].nunique())
        n_failed = int(df[in_w & df["name"].isin(failed)]["event_id"].nunique())
        lost = _lost(df, started, completed + failed, int(grace.total_seconds() * 1000), ws, at)
        total = n_completed + n_failed + lost
        values[check] = (n_failed + lost) / total if total else None

    latencies = df[in_w & df["name"].isin(ev.recall_completed)]["latency_ms"].dropna()
    latencies = latencies[latencies.map(lambda x: math.isfinite(x) and x >= 0)].sort_values()
    n = len(latencies)
    values["recall_latency_p95"] = float(latencies.iloc[(n * 95 + 99) // 100 - 1]) if n else None

    gates = df[in_w & df["name"].isin(ev.gate_decision)]
    values["write_gate_drift"] = (
        float((gates["verdict"] == "discard").mean()) if len(gates) else None
    )

    values["telemetry_freshness"] = (at - int(df["t"].max())) / 1000 if len(df) else None
    return values
