"""Every table the OpenTelemetry Collector's ClickHouse exporter writes gives the same verdicts.

Each layout and version of the exporter's logs and traces tables (Map and
JSON, created with the exporter's DDL and filled as the exporter fills them)
holds the same events; the otel presets read each of them to the same
report as the current Map layout's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from checks.base import Report, Status
from checks.builtin import configured_checks
from checks.evidence import Evidence
from checks.materialize import materialize_statements, plan_for
from checks.source_ddl import create_table_sql
from checks.sources import open_source
from tests.builder import T0, H, M, S, Scenario, evaluate_table, settings_for, unique_table
from tests.exporter import LOG_LAYOUTS, TRACE_LAYOUTS, Span, write_otel_logs, write_otel_traces
from watchdog.core.errors import ConfigError, StoreError
from watchdog.core.settings import settings_from_mapping
from watchdog.core.store import Store
from watchdog.runner.once import run_once, window_at
from watchdog.runner.plugins import PLUGINS

AT = T0 + 4 * H
LOGS = {"source": {"preset": "otel_logs"}}
TRACES = {"source": {"preset": "otel_traces"}}
GOOD = {"agente": "po", "tipo": "laco"}


def _scenario() -> Scenario:
    """Events for every check: healthy and faulty sessions, deviations, messages, bad values."""
    sc = Scenario()
    warm = sc.session("warm").starts(T0 + H).recalls(T0 + H + S, latency_ms=812.5, result_count=3)
    warm.injects(T0 + H + 2 * S).asks(T0 + H + M, kind="greeting").answers(T0 + H + M + S)
    warm.asks(T0 + H + 2 * M).recalls(T0 + H + 2 * M + S, latency_ms=4000).answers(T0 + H + 3 * M)
    warm.compacts(T0 + H + 20 * M).observes(T0 + H + 21 * M).ends(T0 + 2 * H)
    warm.observes(T0 + 2 * H + M)
    warm.emits("memory.gate.decision", T0 + H + 22 * M, meta={"verdict": "discard", "score": 0.4})
    warm.emits("memory.gate.decision", T0 + H + 23 * M, meta={"verdict": "allow", "score": 0.9})
    cold = (
        sc.session("cold")
        .starts(T0 + H)
        .asks(T0 + H + M, id="unanswered")
        .answers(T0 + H + M + 5 * S)
    )
    cold.observes(T0 + H + 2 * M, fails=True).observes(T0 + H + 3 * M, lost=True)
    cold.recalls(T0 + H + 4 * M, fails=True).ends(T0 + 2 * H)
    dev = sc.session("dev").starts(T0 + H).recalls(T0 + H + S)
    dev.deviates(T0 + H + M, {**GOOD, "evidenceEventIds": ["unanswered"]})
    dev.deviates(T0 + H + 2 * M, {**GOOD, "evidenceEventIds": ["ghost"]})
    dev.deviates(T0 + H + 3 * M, {**GOOD, "evidenceEventIds": [], "nota": "free text"})
    dev.deviates(T0 + H + 4 * M, {**GOOD, "evidenceEventIds": ["a", "a"]})
    dev.deviates(T0 + H + 5 * M, {**GOOD, "evidenceEventIds": [f"e{i}" for i in range(21)]})
    dev.deviates(T0 + H + 6 * M, {"agente": "po", "tipo": "abandono", "evidenceEventIds": []})
    dev.emits("memory.recall.completed", T0 + H + 7 * M, meta={"latency_ms": "fast"})
    sc.duplicate(sc.events[2])
    sc.event("gateway.heartbeat", T0 + 3 * H)
    return sc


def _report(store: Store, layout: str, **kwargs: Any) -> dict[str, Any]:
    table = unique_table()
    write_otel_logs(store, table, _scenario(), layout=layout, **kwargs)
    return _comparable(evaluate_table(store, table, AT, LOGS))


def _comparable(report: Report) -> dict[str, Any]:
    """The whole JSON report but the source's name (which names the table read)."""
    document = report.to_json()
    del document["source"]
    return document


@pytest.fixture(scope="module")
def map_logs(store: Store) -> dict[str, Any]:
    """The current Map layout's report: what every other layout must give."""
    report = _report(store, "otel_logs")
    statuses = {c["status"] for c in report["checks"].values()}
    assert statuses >= {"ok", "breached", "insufficient_data"}, report["checks"]
    assert report["checks"]["recall_before_response"]["value"] == 1
    return report


@pytest.mark.parametrize("layout", [name for name in LOG_LAYOUTS if name != "otel_logs"])
def test_every_logs_layout_gives_the_map_layouts_report(
    store: Store, map_logs: dict[str, Any], layout: str
) -> None:
    """Older Map versions and every JSON version: the same checks, values and evidence."""
    assert _report(store, layout) == map_logs


def test_json_layout_with_an_empty_event_name_reads_the_attribute(
    store: Store, map_logs: dict[str, Any]
) -> None:
    """The newest JSON version with EventName empty: the name comes from event.name."""
    report = _report(store, "otel_logs_json_event_name", name_in_attributes=True)
    assert report == map_logs


def _spans() -> list[Span]:
    spans = [Span("memory.recall", T0 + H + i * M, 400.0 + i, f"s{i}") for i in range(20)]
    spans += [Span("memory.recall", T0 + 2 * H, 3500.0, "e1", status="Error")]
    spans += [Span("memory.recall", T0 + 2 * H + S, 2500.0, "e2", status="STATUS_CODE_ERROR")]
    spans += [
        Span(
            "memory.observe",
            T0 + 2 * H + 2 * S,
            900.0,
            "e3",
            attributes={"trigger": "compaction", "result_count": 2, "tags": ["a", "b"]},
        )
    ]
    return spans


@pytest.mark.parametrize("layout", [name for name in TRACE_LAYOUTS if name != "otel_traces"])
def test_every_traces_layout_gives_the_map_layouts_report(store: Store, layout: str) -> None:
    """Spans in every traces layout: the same report as the current Map layout."""
    reports = []
    for each in ("otel_traces", layout):
        table = unique_table()
        write_otel_traces(store, table, _spans(), layout=each)
        reports.append(_comparable(evaluate_table(store, table, AT, TRACES)))
    assert reports[0]["checks"]["recall_failure_rate"]["status"] == "breached"
    assert reports[1] == reports[0]


def _payload(store: Store, table: str, config: dict[str, Any], name: str) -> dict[str, Any]:
    """The normalized payload of the event named `name`, as the compiled source gives it."""
    settings = settings_for(table, config)
    source = open_source(store, settings.source)
    params = {**source.params, **window_at(settings, AT).params(), "name": name}
    rows = store.query(
        f"SELECT payload FROM {source.events()} WHERE name = {{name:String}}", params
    ).rows
    return dict(json.loads(rows[0][0]))


def test_json_dotted_keys_are_flat_payload_keys(store: Store) -> None:
    """session.id, event.id, event.name stored as nested paths are flat keys of the payload."""
    sc = Scenario()
    sc.session("s1").deviates(T0 + H, {**GOOD, "evidenceEventIds": ["x", "y"]}, id="d1")
    table = unique_table()
    write_otel_logs(store, table, sc, layout="otel_logs_json", name_in_attributes=True)
    payload = _payload(store, table, LOGS, "anamnese.agent_deviation")
    assert payload == {
        "agente": "po",
        "tipo": "laco",
        "evidenceEventIds": '["x","y"]',  # as the Map layout holds an array: JSON text
        "session.id": "s1",
        "event.id": "d1",
        "event.name": "anamnese.agent_deviation",
    }


def test_envelope_keys_stored_as_paths_keep_the_contract(store: Store) -> None:
    """A conforming deviation stays conforming although its envelope keys are nested paths."""
    sc = Scenario()
    sc.session("s1").starts(T0 + H).deviates(T0 + H + M, {**GOOD, "evidenceEventIds": []}, id="d1")
    table = unique_table()
    write_otel_logs(store, table, sc, layout="otel_logs_json")
    result = evaluate_table(store, table, AT, LOGS).checks["agent_deviation_contract"]
    assert (result.status, result.value, result.sample_size) == (Status.OK, 0, 1)


# --- session ids -------------------------------------------------------------------------


def _sessions(store: Store, layout: str, config: dict[str, Any], **kwargs: Any) -> list[str]:
    """The sessions that missed their start recall (all of them: nobody recalls)."""
    sc = Scenario()
    sc.session("conv-1").starts(T0 + H)
    sc.session("conv-2").starts(T0 + H + M)
    table = unique_table()
    write_otel_logs(store, table, sc, layout=layout, **kwargs)
    result = evaluate_table(store, table, AT, config).checks["recall_coverage"]
    return list(result.evidence.sessions or ())


@pytest.mark.parametrize("layout", ["otel_logs", "otel_logs_json"])
def test_session_from_the_genai_conversation_id(store: Store, layout: str) -> None:
    """OpenTelemetry GenAI's gen_ai.conversation.id is a session id by default."""
    found = _sessions(store, layout, LOGS, session_key="gen_ai.conversation.id")
    assert found == ["conv-1", "conv-2"]


@pytest.mark.parametrize("layout", ["otel_logs", "otel_logs_json"])
def test_session_from_the_resource_attributes(store: Store, layout: str) -> None:
    """A session key in the resource's attributes counts when the event's own have none."""
    found = _sessions(store, layout, LOGS, session_in_resource=True)
    assert found == ["conv-1", "conv-2"]


@pytest.mark.parametrize("layout", ["otel_logs", "otel_logs_json"])
def test_session_keys_are_configurable(store: Store, layout: str) -> None:
    """source.session_keys replaces the list; the default keys are then not read."""
    config = {"source": {"preset": "otel_logs", "session_keys": ["thread.id"]}}
    assert _sessions(store, layout, config, session_key="thread.id") == ["conv-1", "conv-2"]
    assert _sessions(store, layout, config) == []


def test_the_events_own_session_key_wins_over_the_resources(store: Store) -> None:
    """The first present key in the event's attributes, then in the resource's."""
    table = unique_table()
    write_otel_logs(store, table, Scenario(), layout="otel_logs_json")
    own = {"session.id": "own", "event.id": "e1", "event.name": "session.started"}
    resource = {"service.name": "svc", "gen_ai.conversation.id": "res"}
    store.insert(
        table,
        [[T0 + H, "svc", json.dumps(own), json.dumps(resource)]],
        ["Timestamp", "ServiceName", "LogAttributes", "ResourceAttributes"],
    )
    result = evaluate_table(store, table, AT, LOGS).checks["recall_coverage"]
    assert result.evidence == Evidence(sessions=("own",))


def test_session_keys_belong_to_the_otel_presets() -> None:
    """session_keys with another preset is a config error naming the key."""
    with pytest.raises(ConfigError, match=r"source: .*session_keys: the joelclaw preset reads no"):
        settings_from_mapping({"source": {"session_keys": ["x"]}}, plugins=PLUGINS, env={})


def _span_sessions(store: Store, layout: str, config: dict[str, Any], **kwargs: Any) -> list[str]:
    """The span sessions that missed their start recall (all of them: nobody recalls)."""
    spans = [
        Span("tool.call", T0 + H, 100.0, "conv-1"),
        Span("tool.call", T0 + H + M, 100.0, "conv-2"),
    ]
    table = unique_table()
    write_otel_traces(store, table, spans, layout=layout, **kwargs)
    result = evaluate_table(store, table, AT, config).checks["recall_coverage"]
    return list(result.evidence.sessions or ())


@pytest.mark.parametrize("layout", ["otel_traces", "otel_traces_json"])
def test_span_session_from_the_genai_conversation_id(store: Store, layout: str) -> None:
    """Spans too: gen_ai.conversation.id in the span's attributes is the session id."""
    found = _span_sessions(store, layout, TRACES, session_key="gen_ai.conversation.id")
    assert found == ["conv-1", "conv-2"]


@pytest.mark.parametrize("layout", ["otel_traces", "otel_traces_json"])
def test_span_session_from_the_resource_attributes(store: Store, layout: str) -> None:
    """A span without a session key of its own takes the resource's."""
    found = _span_sessions(store, layout, TRACES, session_in_resource=True)
    assert found == ["conv-1", "conv-2"]


def test_span_session_keys_are_configurable(store: Store) -> None:
    """source.session_keys replaces the list for the otel_traces preset too."""
    config = {"source": {"preset": "otel_traces", "session_keys": ["thread.id"]}}
    found = _span_sessions(store, "otel_traces_json", config, session_key="thread.id")
    assert found == ["conv-1", "conv-2"]
    assert _span_sessions(store, "otel_traces_json", config) == []


# --- what cannot be read ------------------------------------------------------------------


def _table_with(store: Store, replace: tuple[str, str]) -> str:
    """An otel_logs table (current DDL) with one column's type replaced."""
    table = unique_table()
    store.command(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    store.command(create_table_sql("otel_logs", table).replace(*replace))
    return table


def test_an_attribute_column_of_unknown_type_is_one_store_error(store: Store) -> None:
    """LogAttributes of a type the preset cannot read: a StoreError naming table, column, types."""
    table = _table_with(
        store, ("LogAttributes Map(LowCardinality(String), String)", "LogAttributes Array(String)")
    )
    settings = settings_for(table, LOGS)
    with pytest.raises(StoreError) as err:
        run_once(store, settings, window_at(settings, AT))
    assert err.value.problem == (
        f"table {table}: column LogAttributes is of type Array(String), which the otel_logs"
        " preset cannot read (accepted: Map(LowCardinality(String), String) or JSON);"
        " map your own under [source.columns]"
    )


def test_a_column_of_unknown_type_is_fine_when_the_config_maps_it(store: Store) -> None:
    """A column the config's own expressions replace is not read: its type does not matter."""
    table = _table_with(store, ("EventName String", "EventName Array(String)"))
    settings = settings_for(table, {"source": {"preset": "otel_logs", "columns": {"name": "'x'"}}})
    report = run_once(store, settings, window_at(settings, AT))
    assert report.checks["recall_coverage"].status is Status.NO_DATA


def test_a_column_expression_that_does_not_compile_names_its_key(store: Store) -> None:
    """A [source.columns] expression the server refuses: ConfigError naming the key, one line."""
    table = unique_table()
    write_otel_logs(store, table, Scenario(), layout="otel_logs_json")
    config = {"source": {"preset": "otel_logs", "columns": {"session_id": "no_such_column"}}}
    with pytest.raises(ConfigError) as err:
        open_source(store, settings_for(table, config).source)
    assert err.value.key == "source.columns.session_id"
    assert err.value.problem.startswith("does not compile: ")
    assert "no_such_column" in err.value.problem and "\n" not in err.value.problem
    assert "SELECT" not in err.value.problem  # the server's words, not the query


def test_a_session_filter_that_does_not_compile_names_its_key(store: Store) -> None:
    """A session_filter the server refuses: ConfigError naming source.session_filter."""
    table = unique_table()
    write_otel_logs(store, table, Scenario())
    config = {"source": {"preset": "otel_logs", "session_filter": "ServiceName = "}}
    with pytest.raises(ConfigError) as err:
        open_source(store, settings_for(table, config).source)
    assert err.value.key == "source.session_filter"
    assert err.value.problem.startswith("does not compile: syntax error at ")
    assert "Expected" in err.value.problem and "FROM" not in err.value.problem


# --- the narrow table ---------------------------------------------------------------------


def _narrow_report(store: Store, raw: str, config: dict[str, Any]) -> dict[str, Any]:
    """Build the narrow table from `raw` (schema apply --materialize's statements), report on it."""
    settings = settings_for(raw, config)
    plan = plan_for(settings, ttl=None, database=f"narrow_{uuid.uuid4().hex[:10]}")
    present = store.table_columns(raw)
    for statement in materialize_statements(
        settings, plan, present, configured_checks(settings), since=T0 - 24 * H, until=AT + H
    ):
        store.command(statement.sql, statement.params)
    return _comparable(evaluate_table(store, plan.table, AT, {"source": {"preset": "normalized"}}))


@pytest.mark.parametrize("layout", ["otel_logs_legacy", "otel_logs_json_v1", "otel_logs_json"])
def test_the_narrow_table_from_each_layout_gives_the_same_report(
    store: Store, map_logs: dict[str, Any], layout: str
) -> None:
    """schema apply --materialize from a JSON (or older Map) table: the same report again."""
    raw = unique_table()
    write_otel_logs(store, raw, _scenario(), layout=layout)
    narrow = _narrow_report(store, raw, LOGS)
    # The narrow table holds latencies as numbers: one written as text that is not a
    # number is NULL there, no longer counted as a latency ignored.
    expected = {**map_logs, "data_quality": {**map_logs["data_quality"], "latency_ignored": 0}}
    assert narrow == expected


@pytest.mark.parametrize("layout", ["otel_traces", "otel_traces_json"])
def test_the_narrow_table_from_each_traces_layout_gives_the_same_report(
    store: Store, layout: str
) -> None:
    """schema apply --materialize from a spans table, Map or JSON: the Map layout's report."""
    expected_table, raw = unique_table(), unique_table()
    write_otel_traces(store, expected_table, _spans())
    expected = _comparable(evaluate_table(store, expected_table, AT, TRACES))
    write_otel_traces(store, raw, _spans(), layout=layout)
    assert _narrow_report(store, raw, TRACES) == expected


# --- from the command line ----------------------------------------------------------------

SETUP = """
import sys
from checks.source_ddl import create_table_sql as ddl
from watchdog.core.store import open_store
with open_store(sys.argv[1], create=True) as store:
    store.command("CREATE DATABASE IF NOT EXISTS otel")
    store.command(ddl("otel_logs_json", "otel.good"))
    store.command(ddl("otel_logs_json", "otel.bad").replace(
        "LogAttributes JSON", "LogAttributes Array(String)"))
    store.command(ddl("otel_traces_json", "otel.spans_untyped").replace(
        "Duration UInt64", "Duration String"))
    store.command(ddl("otel_traces_json", "otel.spans_lacking").replace(
        "StatusCode LowCardinality(String),", ""))
"""
AT_TEXT = "2026-11-28T04:00:00Z"


@pytest.fixture(scope="module")
def exporter_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An embedded store with exporter tables: one readable, three the presets cannot read."""
    url = f"chdb://{tmp_path_factory.mktemp('exporter') / 'store'}"
    subprocess.run([sys.executable, "-c", SETUP, url], check=True, cwd=Path(__file__).parents[1])
    return url


def _check(url: str, tmp_path: Path, toml: str) -> subprocess.CompletedProcess[str]:
    """`python -m watchdog check` with this config, as a user runs it."""
    config = tmp_path / "watchdog.toml"
    config.write_text(toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "watchdog",
            "check",
            "--store",
            url,
            "--config",
            str(config),
            "--at",
            AT_TEXT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).parents[1],
        check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The run's exit code is `code`, it printed no report, and said why in one line."""
    assert result.returncode == code, result.stderr
    assert result.stdout == ""  # no report of error rows
    (line,) = result.stderr.strip().splitlines()
    assert "SELECT" not in line
    return line


@pytest.mark.slow
def test_cli_attribute_column_of_unknown_type_is_exit_3(
    exporter_store: str, tmp_path: Path
) -> None:
    """An attribute column of a type the preset cannot read: exit 3, table, column, type, accepted."""
    toml = '[source]\npreset = "otel_logs"\ntable = "otel.bad"\n'
    line = _one_line(_check(exporter_store, tmp_path, toml), 3)
    assert line.startswith(f"memory-watchdog: store {exporter_store}: table otel.bad: ")
    assert "column LogAttributes is of type Array(String), which the otel_logs preset" in line
    assert "(accepted: Map(LowCardinality(String), String) or JSON)" in line


@pytest.mark.slow
def test_cli_span_column_of_unknown_type_is_exit_3(exporter_store: str, tmp_path: Path) -> None:
    """otel_traces on a Duration that is no integer: exit 3 naming the column and what is accepted."""
    toml = '[source]\npreset = "otel_traces"\ntable = "otel.spans_untyped"\n'
    line = _one_line(_check(exporter_store, tmp_path, toml), 3)
    assert (
        "table otel.spans_untyped: column Duration is of type String, which the otel_traces"
        " preset cannot read (accepted: an integer type (UInt64, ...))" in line
    )


@pytest.mark.slow
def test_cli_missing_column_is_exit_3_naming_table_and_column(
    exporter_store: str, tmp_path: Path
) -> None:
    """A column the preset reads that the table lacks: exit 3 naming the table and the column."""
    toml = '[source]\npreset = "otel_traces"\ntable = "otel.spans_lacking"\n'
    line = _one_line(_check(exporter_store, tmp_path, toml), 3)
    assert "table otel.spans_lacking has no column StatusCode (the otel_traces preset" in line


@pytest.mark.slow
def test_cli_broken_column_expression_is_exit_2(exporter_store: str, tmp_path: Path) -> None:
    """A [source.columns] expression the server refuses: exit 2 naming the key and its words."""
    toml = (
        '[source]\npreset = "otel_logs"\ntable = "otel.good"\n'
        '[source.columns]\nsession_id = "no_such_column"\n'
    )
    line = _one_line(_check(exporter_store, tmp_path, toml), 2)
    assert line.startswith("memory-watchdog: source.columns.session_id: does not compile: ")
    assert "no_such_column" in line


@pytest.mark.slow
def test_cli_broken_session_filter_is_exit_2(exporter_store: str, tmp_path: Path) -> None:
    """A session_filter that does not parse: exit 2 naming source.session_filter and the token."""
    toml = (
        '[source]\npreset = "otel_logs"\ntable = "otel.good"\nsession_filter = "ServiceName = "\n'
    )
    line = _one_line(_check(exporter_store, tmp_path, toml), 2)
    assert line.startswith(
        "memory-watchdog: source.session_filter: does not compile: syntax error at "
    )
    assert "Expected" in line
