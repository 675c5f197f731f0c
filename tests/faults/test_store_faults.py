"""Store faults on the production path: clickhouse-connect's HTTP client, the harness, a proxy.

The whole check suite runs through the chdb-backed ClickHouse HTTP server and
must give the embedded path's verdicts; then a fault proxy sits in front of
it. A fault may turn checks into `error` results or the whole run into a
`StoreError` (exit 3), but never into a verdict other than the fault-free
one. The CLI cases run `memory-watchdog` in a subprocess against the server
of this process (an HTTP store: the subprocess opens no embedded engine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from checks.builtin import configured_checks
from checks.evaluate import evaluate
from checks.kinds import session_scopes
from checks.sources import open_source
from tests.builder import T0, H, M, S, Scenario, settings_for
from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.conftest import PASSWORD
from tests.faults.proxy import FaultProxy
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_store
from watchdog.demo.data import write_demo
from watchdog.runner.once import run_once, window_at
from watchdog.runner.slo import SLOS_LOST, slo_reports

BIN = Path(sys.executable).parent / "memory-watchdog"
AT = datetime(2026, 11, 28, 4, tzinfo=UTC)
# The requests of one evaluation of the demo source: the column lookup, the session
# query, the window query (p95, streak, share), the deviation contract with its
# aggregation, the evidence lookup (cited ids), and last the listed events' details.
SOURCE_QUERIES = 6
# The note of a run whose listed events' details could not be read (checks.listed): the
# verdicts and the ids stand, without `event_details`.
DETAILS_LOST = "the listed events' details could not be read ("
AT_TEXT = "2026-11-28T04:00:00Z"
CANARY = "Canary-Pw-7f3a9"  # a password that must never be printed


def run_json(store: Store, settings: Settings) -> dict[str, Any]:
    return run_once(store, settings, window_at(settings, AT)).to_json()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["XDG_DATA_HOME"] = "/nonexistent-xdg"
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def details_lost(got: dict[str, Any]) -> list[str]:
    """The report's notes saying the listed events' details could not be read."""
    return [n for n in got.get("notes", ()) if n.startswith(DETAILS_LOST)]


def slos_lost(got: dict[str, Any]) -> bool:
    """The report says its SLOs could not be read from the ledger (and carries none)."""
    lost = any(n.startswith(SLOS_LOST) for n in got.get("notes", ()))
    if lost:
        assert got["slos"] == {}
    return lost


def without_details(result: dict[str, Any]) -> dict[str, Any]:
    evidence = {k: v for k, v in result["evidence"].items() if k != "event_details"}
    return {**result, "evidence": evidence}


def no_wrong_verdict(got: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """The checks that errored; fails if any other check differs from the fault-free run
    (with the listed events' details left out when a note says they could not be read)."""
    errored = [c for c, r in got["checks"].items() if r["status"] == "error"]
    lost = bool(details_lost(got))
    for check_id, result in got["checks"].items():
        if check_id not in errored:
            expected = baseline["checks"][check_id]
            assert result == (without_details(expected) if lost else expected), check_id
    if "agent_deviation_contract" not in errored:  # the aggregation comes with that check
        assert got["deviations"] == baseline["deviations"]
    if "recall_coverage" not in errored:  # data_quality comes with the session query
        assert got["data_quality"] == baseline["data_quality"]
    if not slos_lost(got):  # SLOs read from the ledger are exact, or absent and said so
        assert got["slos"] == baseline["slos"]
    assert got["status"] == ("error" if errored else baseline["status"])
    return errored


@pytest.fixture(scope="module")
def demo(store: Store) -> Settings:
    """Demo telemetry (every check has something to judge, most breach) in a table of its own."""
    table = f"sf_{uuid.uuid4().hex[:10]}.otel_events"
    write_demo(store, table, sessions=100, seed=1, at=AT)
    return settings_for(table)


@pytest.fixture(scope="module")
def baseline(store: Store, demo: Settings) -> dict[str, Any]:
    """The embedded path's report on the demo table."""
    return run_json(store, demo)


@pytest.fixture
def proxy(ch_server: ClickHouseHTTPServer) -> Iterator[FaultProxy]:
    with FaultProxy(ch_server.port) as fault_proxy:
        yield fault_proxy


def proxy_url(proxy: FaultProxy, password: str = PASSWORD) -> str:
    return f"http://default:{password}@127.0.0.1:{proxy.port}/default"


# ---- the HTTP path gives the embedded path's verdicts ---------------------------------


def test_http_path_gives_the_embedded_verdicts(
    ch_server: ClickHouseHTTPServer, demo: Settings, baseline: dict[str, Any]
) -> None:
    """Every check over clickhouse-connect's HTTP client reports what the embedded path reports."""
    with open_store(ch_server.url(), query_timeout_s=30) as http_store:
        got = run_json(http_store, demo)
        assert http_store.transfer.queries >= SOURCE_QUERIES
    assert got == baseline
    assert {r["status"] for r in got["checks"].values()} >= {"ok", "breached"}


def test_the_planning_settings_reach_a_server_that_knows_them_and_no_other(
    store: Store, ch_server: ClickHouseHTTPServer
) -> None:
    """`watchdog.core.store.PLANNING` (the analyzer's AND-chain pass off) is in force for every
    query, embedded and over HTTP; a server that does not list a setting in system.settings (an older
    ClickHouse, which would refuse it) is not sent it, and answers with its own default."""
    asked = "SELECT getSetting('optimize_and_compare_chain')"
    assert store.query(asked).rows == [(False,)]
    with open_store(ch_server.url(), query_timeout_s=30) as http_store:
        assert http_store.query(asked).rows == [(False,)]
        client = http_store.client
        older = dict(client.server_settings)
        del older["optimize_and_compare_chain"]
        kept, client.server_settings = client.server_settings, older
        try:
            assert Store(client, http_store.url).query(asked).rows == [(True,)]
        finally:
            client.server_settings = kept


def test_check_opens_the_store_once(ch_server: ClickHouseHTTPServer) -> None:
    """`check` with no source configured asks the store for the default source's table and
    evaluates on the one client it opened: one connection's handshake (the client reads
    system.settings when it connects), not one for the lookup and another for the run."""
    before = len(ch_server.requests)
    done = cli("check", "--store", ch_server.url(), "--at", AT_TEXT)
    # This store holds neither default table (the tests' tables are their own): the run gets
    # as far as reading the source's columns, and says which table is missing.
    assert done.returncode == 3 and "joelclaw.otel_events not found" in done.stderr, done.stderr
    sent = [r.query for r in ch_server.requests[before:]]
    assert any("FROM system.tables WHERE" in q for q in sent), sent  # the default table lookup
    assert sum("system.settings" in q for q in sent) == 1, sent


def test_http_path_keeps_hostile_strings_byte_for_byte(
    store: Store, ch_server: ClickHouseHTTPServer
) -> None:
    """NUL bytes, quotes, 10 KB ids and invalid UTF-8 cross the HTTP path as the embedded path reads them."""
    sc = Scenario()
    for i in range(20):
        sc.session(f"ok{i}").starts(T0 + H).recalls(T0 + H + S).ends(T0 + 2 * H).observes(
            T0 + 2 * H + M
        )
    sc.session("q'uote\"s; --{x:String}$1").starts(T0 + H)
    sc.session("nul\x00id").starts(T0 + H).recalls(T0 + H + S)
    sc.session("s" * 10_000).starts(T0 + 2 * H)
    sc.event("session.started", T0 + H, None, metadata_json='{"session_id": "bad\\udcff"}')
    sc.event("memory.recall.completed", T0 + H, "ok1", metadata_json='{"latency_ms": "fast"}')
    table = f"sf_{uuid.uuid4().hex[:10]}.otel_events"
    sc.write(store, table)
    settings = settings_for(table)
    embedded = run_json(store, settings)
    with open_store(ch_server.url(), query_timeout_s=30) as http_store:
        over_http = run_json(http_store, settings)
    assert over_http == embedded
    cold = embedded["checks"]["recall_coverage"]["evidence"]["sessions"]
    assert "q'uote\"s; --{x:String}$1" in cold and "s" * 10_000 in cold
    assert embedded["data_quality"]["session_id_over_1kib"] == 1


# ---- a response cut short ---------------------------------------------------------------

# Where to cut the response to one request: inside the headers before the query id (the
# client reads an empty result), after the summary header but before the body's framing
# (an empty result whose summary counts rows), and inside the body (a broken stream).
CUTS = {
    "in_headers": {"cut_before": b"X-ClickHouse-Query-Id"},
    "before_framing": {"cut_before": b"Content-Length"},
    "in_body": {"cut_in_body": 1},
}


@pytest.mark.slow
@pytest.mark.parametrize("where", list(CUTS))
def test_a_response_cut_in_any_query_is_an_error_never_a_wrong_verdict(
    proxy: FaultProxy, demo: Settings, baseline: dict[str, Any], where: str
) -> None:
    """Cutting the response to any one query gives a StoreError or `error` checks, never another verdict."""
    proxy.set_mode("cut_request")
    proxy.fault_request = 10**9  # count the requests of a fault-free run first
    with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
        assert run_json(http_store, demo) == baseline
        requests = proxy.requests
        slo_reports(http_store, demo, AT)
        ledger = proxy.requests - requests  # the run's last reads are the SLO ledger's
    assert requests >= SOURCE_QUERIES + ledger and ledger >= 1
    outcomes: dict[int, str] = {}
    for k in range(1, requests + 1):
        proxy.set_mode("cut_request")
        proxy.fault_request = k
        proxy.cut_before = CUTS[where].get("cut_before")  # type: ignore[assignment]
        proxy.cut_in_body = CUTS[where].get("cut_in_body")  # type: ignore[assignment]
        try:
            with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
                got = run_json(http_store, demo)
        except StoreError as exc:
            assert CANARY not in str(exc) and PASSWORD not in str(exc)
            outcomes[k] = f"store error: {exc.problem}"
            continue
        errored = no_wrong_verdict(got, baseline)
        if details_lost(got):
            outcomes[k] = "details lost"
        elif slos_lost(got):
            outcomes[k] = "slos lost"
        else:
            outcomes[k] = f"errored: {', '.join(errored)}" if errored else "unaffected"
    # The source's queries (after the client's own handshake) all turned into errors, and
    # each cut in the ledger's reads into a report without SLOs that says so.
    first_source = requests - ledger - SOURCE_QUERIES
    source_queries = [o for k, o in outcomes.items() if first_source < k <= requests - ledger]
    assert all(o != "unaffected" for o in source_queries), outcomes
    assert all(outcomes[k] == "slos lost" for k in range(requests - ledger + 1, requests + 1)), (
        outcomes
    )
    assert any(o.startswith("errored") for o in outcomes.values()), outcomes


def test_a_cut_inside_the_headers_reads_as_an_incomplete_response(
    proxy: FaultProxy, demo: Settings
) -> None:
    """The client bug (a cut inside the headers reads as empty) is caught for every query, not only aggregates."""
    with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
        proxy.set_mode("close_mid_response")
        proxy.truncate_after = 100
        with pytest.raises(StoreError, match="incomplete response"):
            http_store.query(
                "SELECT name FROM system.columns WHERE 0"
            )  # a legitimately empty query
        with pytest.raises(StoreError, match="incomplete response"):
            http_store.table_columns(demo.source.table or "")  # not "table not found"
        proxy.set_mode("pass")
        assert http_store.query("SELECT name FROM system.columns WHERE 0").rows == []


# ---- the store unreachable, stalled, failing, lying or refusing us ----------------------


@pytest.mark.parametrize("mode", ["refuse", "reset"])
def test_unreachable_at_start_exits_3_with_one_masked_line(proxy: FaultProxy, mode: str) -> None:
    """A server that refuses or resets connections is exit 3, one line, the password masked."""
    proxy.set_mode(mode)
    result = cli("check", "--store", proxy_url(proxy, CANARY), "--at", AT_TEXT)
    assert result.returncode == 3, result.stderr
    line = one_line(result.stderr)
    assert f"http://default:***@127.0.0.1:{proxy.port}/default" in line
    assert CANARY not in result.stderr + result.stdout
    assert "unreachable" in line or "reset" in line


@pytest.mark.slow
def test_a_stall_ends_at_the_query_timeout_with_exit_3(proxy: FaultProxy, tmp_path: Path) -> None:
    """A server that never answers costs store.query_timeout, then exit 3 saying so."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("[store]\nquery_timeout = '2s'\n")
    proxy.set_mode("stall")
    started = time.monotonic()
    result = cli("check", "--store", proxy_url(proxy, CANARY), "--config", str(cfg))
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert "query timed out (raise store.query_timeout)" in one_line(result.stderr)
    assert CANARY not in result.stderr
    assert elapsed < 15


@pytest.mark.slow
@pytest.mark.parametrize("query", [2, SOURCE_QUERIES - 1, SOURCE_QUERIES])
def test_a_stall_in_one_query_errors_its_checks_in_bounded_time(
    proxy: FaultProxy, demo: Settings, baseline: dict[str, Any], query: int
) -> None:
    """One query stalling makes its checks `error` after query_timeout; the others keep their
    verdicts. The last, the listed events' details, leaves every verdict and says so in a note.

    `query` counts the source's queries from 1: the session query, the cited ids' evidence
    lookup, the listed events' details.
    """
    proxy.set_mode("stall_request")
    proxy.fault_request = 10**9  # count the requests of a fault-free run first
    with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
        run_json(http_store, demo)
        before_slos = proxy.requests
        slo_reports(http_store, demo, AT)  # the SLOs' ledger reads, which follow the source's
        ledger = proxy.requests - before_slos
    requests = proxy.requests - ledger
    proxy.set_mode("stall_request")
    proxy.fault_request = requests - ledger - SOURCE_QUERIES + query
    started = time.monotonic()
    with open_store(proxy_url(proxy), query_timeout_s=2) as http_store:
        got = run_json(http_store, demo)
    assert time.monotonic() - started < 12
    errored = no_wrong_verdict(got, baseline)
    if query == SOURCE_QUERIES:
        assert not errored
        assert details_lost(got) == [
            f"{DETAILS_LOST}query timed out (raise store.query_timeout)): ids only"
        ]
        return
    assert errored and not details_lost(got)
    assert all(
        got["checks"][c]["summary"]
        == "could not evaluate: query timed out (raise store.query_timeout)"
        for c in errored
    )


@pytest.mark.slow
def test_a_stall_reading_the_slo_ledger_keeps_every_verdict_and_says_so(
    proxy: FaultProxy, demo: Settings, baseline: dict[str, Any]
) -> None:
    """The SLOs' ledger read stalling costs no verdict: the report keeps every check's, without
    SLOs, and its notes say the SLOs could not be read."""
    proxy.set_mode("stall_request")
    proxy.fault_request = 10**9  # count the requests of a fault-free run first
    with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
        run_json(http_store, demo)
        before_slos = proxy.requests
        slo_reports(http_store, demo, AT)
        ledger = proxy.requests - before_slos
    assert ledger >= 1
    proxy.set_mode("stall_request")
    proxy.fault_request = before_slos - ledger + 1  # the run's first read of the SLO ledger
    with open_store(proxy_url(proxy), query_timeout_s=2) as http_store:
        got = run_json(http_store, demo)
    assert not no_wrong_verdict(got, baseline)
    assert got["slos"] == {}
    assert got["notes"] == [f"{SLOS_LOST}query timed out (raise store.query_timeout))"]


def test_http_500_exits_3_with_clickhouse_words(proxy: FaultProxy) -> None:
    """A 500 with a ClickHouse exception is exit 3 quoting the exception, password masked."""
    proxy.set_mode("http_500")
    result = cli("check", "--store", proxy_url(proxy, CANARY))
    assert result.returncode == 3
    line = one_line(result.stderr)
    assert "MEMORY_LIMIT_EXCEEDED" in line and CANARY not in line


def checks_after_opening(store: Store, settings: Settings, proxy: FaultProxy, mode: str) -> Any:
    """Open the source fault-free, switch the proxy to `mode`, then run every check."""
    specs = configured_checks(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    proxy.set_mode(mode)
    return evaluate(store, source, window_at(settings, AT), specs).to_json()


@pytest.mark.parametrize("mode", ["http_500", "garbage", "auth_fail"])
def test_a_failing_server_mid_run_errors_every_check(
    proxy: FaultProxy, demo: Settings, mode: str
) -> None:
    """A server failing after the source was opened turns every check into `error`, none passes."""
    with open_store(proxy_url(proxy), query_timeout_s=10) as http_store:
        got = checks_after_opening(http_store, demo, proxy, mode)
    assert got["status"] == "error"
    assert {r["status"] for r in got["checks"].values()} == {"error"}


def test_garbage_body_is_a_store_error_not_a_crash(proxy: FaultProxy) -> None:
    """A 200 answer with a random Native body (seed 0) is exit 3, one line."""
    proxy.set_mode("garbage")
    result = cli("check", "--store", proxy_url(proxy, CANARY))
    assert result.returncode == 3
    assert "unexpected response" in one_line(result.stderr)
    assert CANARY not in result.stderr


@pytest.mark.parametrize("how", ["proxy", "wrong_password"])
def test_authentication_failure_exits_3_naming_authentication(
    proxy: FaultProxy, ch_server: ClickHouseHTTPServer, how: str
) -> None:
    """A rejected password is exit 3 with one line naming authentication, the password masked."""
    if how == "proxy":
        proxy.set_mode("auth_fail")
        url = proxy_url(proxy, CANARY)
    else:
        url = ch_server.url(password=CANARY)
    result = cli("check", "--store", url, "--at", AT_TEXT)
    assert result.returncode == 3
    line = one_line(result.stderr)
    assert "authentication failed (check user and password)" in line
    assert CANARY not in result.stderr + result.stdout
