"""The OpenTelemetry JS SDK's OTLP/HTTP log exporters, driven by Node, give the direct-insert verdicts.

A Node agent's exporter sends its requests chunked (Node's `http`, no
Content-Length), as JSON (`@opentelemetry/exporter-logs-otlp-http`) or
protobuf (`-otlp-proto`). The packages are installed by `make node` into
.cache/otel-js (`.ci/run` does it); without them these tests skip. The Node
sample of docs/start-without-clickhouse.md is run as written, read from the doc.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builder import unique_table
from tests.exporter import write_otel_logs
from tests.ingest.conftest import Receiving
from tests.ingest.processes import REPO
from tests.ingest.sdk import event_attributes, nanos
from tests.ingest.test_sdk_clients import AT, LOGS, evaluate_table, memory_events, verdicts
from watchdog.core.store import Store

OTEL_JS = REPO / ".cache" / "otel-js"
SEND = Path(__file__).with_name("node") / "send.mjs"
DOC = REPO / "docs" / "start-without-clickhouse.md"
SAMPLE_MARK = "<!-- tests/ingest/test_js_sdk.py runs this sample as written -->"


@pytest.fixture
def node() -> str:
    """The node program, once the JS SDK is installed; else the test skips saying how to get it."""
    program = shutil.which("node")
    if program is None or not (OTEL_JS / "node_modules" / "@opentelemetry" / "sdk-logs").is_dir():
        pytest.skip(
            "needs Node.js and the OpenTelemetry JS SDK: run `make node` (npm, into .cache/otel-js)"
        )
    return program


def events_file(path: Path) -> Path:
    """The scenario's events as send.mjs reads them: name, [seconds, nanos], severity, attributes."""
    events = []
    for event in memory_events().events:
        ns = nanos(event.ts)
        events.append(
            {
                "name": event.name,
                "ts": [ns // 1_000_000_000, ns % 1_000_000_000],
                "severity": "ERROR" if event.success == 0 else "INFO",
                "attributes": event_attributes(event),
            }
        )
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


@pytest.mark.parametrize("encoding", ["json", "proto"])
def test_js_sdk_log_exporter_gives_the_direct_insert_verdicts(
    store: Store,
    receiving: Callable[..., Receiving],
    node: str,
    tmp_path: Path,
    encoding: str,
) -> None:
    """Memory events sent by a Node process through the JS SDK's OTLP/HTTP log exporter (chunked,
    JSON or protobuf) are judged as the same events inserted directly."""
    direct = unique_table()
    write_otel_logs(store, direct, memory_events())
    receiver = receiving()
    done = subprocess.run(
        [
            node,
            str(SEND),
            f"{receiver.endpoint}/v1/logs",
            encoding,
            str(events_file(tmp_path / "e.json")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"OTEL_JS_DIR": str(OTEL_JS), "PATH": str(Path(node).parent)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    receiver.load()
    expected = evaluate_table(store, direct, AT, LOGS)
    got = evaluate_table(store, receiver.logs_table, AT, LOGS)
    assert verdicts(got) == verdicts(expected)


def doc_sample() -> str:
    """The fenced block that follows SAMPLE_MARK in the doc."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(SAMPLE_MARK) + 1
    assert lines[start].startswith("```"), lines[start]
    end = lines.index("```", start + 1)
    return "\n".join(lines[start + 1 : end]) + "\n"


def run_doc_sample(node: str, tmp_path: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    """The doc's Node agent as written, the endpoint in its environment as the doc sets it."""
    (tmp_path / "agent.mjs").write_text(doc_sample(), encoding="utf-8")
    (tmp_path / "node_modules").symlink_to(OTEL_JS / "node_modules")
    return subprocess.run(
        [node, "agent.mjs"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "PATH": str(Path(node).parent)},
        check=False,
    )


def test_the_docs_node_sample_sends_its_record(
    store: Store, receiving: Callable[..., Receiving], node: str, tmp_path: Path
) -> None:
    """The doc's Node agent, run as written with the endpoint in the environment, exits 0
    silently and its memory event is stored with its session and event ids."""
    receiver = receiving()
    done = run_doc_sample(node, tmp_path, receiver.endpoint)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    receiver.load()
    rows = store.query(
        "SELECT EventName, LogAttributes['session.id'], LogAttributes['event.id'], ServiceName"
        f" FROM {receiver.logs_table}"
    ).rows
    assert [tuple(r) for r in rows] == [("memory.recall.completed", "7f9c...", "e-42", "my-agent")]


def test_the_docs_node_sample_says_when_the_receiver_is_down(node: str, tmp_path: Path) -> None:
    """With nothing listening, the doc's agent says so on stderr (its diag logger): the tester's
    first Node agent sent nothing and printed nothing."""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run_doc_sample(node, tmp_path, f"http://127.0.0.1:{port}")
    assert "ECONNREFUSED" in done.stderr, (done.returncode, done.stdout, done.stderr)
