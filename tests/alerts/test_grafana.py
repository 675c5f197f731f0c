"""The shipped Grafana dashboard, config/grafana/memory-watchdog.json, against the real /metrics.

It is a dashboard Grafana imports (a schemaVersion, panels on the grid, each target a Prometheus
query); every series its PromQL names is one the daemon serves after a judged window; and each
query parses as promtool parses it (embedded in a temporary rules file: promtool has no
expression-only check), skipped when promtool is not installed.
docs/operations.md#grafana-dashboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.alerts.prometheus_rig import run_promtool, scrape_after_a_run, served_names
from watchdog.core.store import Store

DASHBOARD = Path(__file__).parents[2] / "config" / "grafana" / "memory-watchdog.json"
# Grafana's variables, each as a value that promtool can parse in its place.
VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1d",
    "$instance": ".*",
    "$source": ".*",
}
# PromQL's words that are not series names (outside braces, brackets and strings).
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "le",
}  # fmt: skip


@pytest.fixture(scope="module")
def scrape(store: Store, tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of a daemon that judged one window."""
    return scrape_after_a_run(store, tmp_path_factory)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def query_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def expressions() -> list[str]:
    """Every PromQL expression of the dashboard's panels."""
    return [t["expr"] for p in query_panels(dashboard()) for t in p["targets"]]


def concrete(expr: str) -> str:
    """The expression with Grafana's variables replaced by values of their kind."""
    for name, value in sorted(VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def series_names(expr: str) -> set[str]:
    """The series an expression selects: identifiers outside `{...}`, `[...]`, strings and
    `by (...)`-like groupings that are neither a function (followed by `(`) nor a keyword."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    words = re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", bare)
    return {w for w in words if w not in PROMQL_WORDS}


def test_the_dashboard_is_grafana_dashboard_json_with_prometheus_targets() -> None:
    """A schemaVersion, a uid, unique panel ids on the 24-column grid, every query panel with
    Prometheus targets (the `datasource` variable) and an expression each."""
    board = dashboard()
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["uid"] and board["title"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
    panels = query_panels(board)
    assert len(panels) >= 8
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"].strip() for t in panel["targets"])
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


def test_every_series_the_dashboard_queries_is_one_the_daemon_serves(
    scrape: str, store: Store, tmp_path: Path
) -> None:
    """The dashboard and the exporter agree on names: a renamed metric fails here, not as an
    empty panel."""
    served = served_names(scrape, store, tmp_path)
    queried = set().union(*(series_names(expr) for expr in expressions()))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            queried |= series_names(variable["definition"].partition("(")[2].rpartition(",")[0])
    assert {"memory_watchdog_check_status", "process_resident_memory_bytes"} <= queried
    assert queried <= served, sorted(queried - served)


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    """`promtool check rules` on the dashboard's expressions, each as a recording rule."""
    rules = tmp_path / "dashboard.rules.yml"
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, expr in enumerate(expressions()):
        lines += [
            f"      - record: dashboard:query_{number}",
            f"        expr: {json.dumps(concrete(expr))}",
        ]
    rules.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked = run_promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(expressions())} rules found" in checked.stdout


def test_series_names_ignores_functions_labels_and_groupings() -> None:
    """The name reader used above: functions, label matchers and `by (...)` are not series."""
    expr = 'sum by (le) (rate(x_bucket{job="a b",le!="1"}[5m])) / on (job) y offset 5m'
    assert series_names(expr) == {"x_bucket", "y"}
