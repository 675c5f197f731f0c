"""A benchmark never prints a ratio for runs that judged nothing: a check in `error` stops it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.guard import EXIT, ErroredChecks, exit_code, refuse_errors
from benchmarks.run import Bench
from tests.builder import T0, H, settings_for, unique_table
from tests.test_schema import _scenario as every_check
from watchdog.core.store import Store
from watchdog.runner.once import window_at

ERRORED = {
    "recall_coverage": {"status": "error", "summary": "could not evaluate: no dim_component"},
    "observe_coverage": {"status": "error", "summary": "could not evaluate: no dim_component"},
    "recall_latency_p95": {"status": "ok", "summary": "p95 1.2s"},
    "circuit_breaker": {"status": "breached", "summary": "4 failures in a row"},
}


def test_a_report_with_checks_in_error_is_refused_naming_each_of_them() -> None:
    """refuse_errors raises naming every check in `error`, the run and why; no other check."""
    with pytest.raises(ErroredChecks) as refused:
        refuse_errors("joelclaw 20M: check --format json", ERRORED)
    message = str(refused.value)
    assert refused.value.checks.keys() == {"recall_coverage", "observe_coverage"}
    assert message.startswith("joelclaw 20M: check --format json: 2 check(s) in error")
    assert "observe_coverage, recall_coverage" in message and "no dim_component" in message
    assert "recall_latency_p95" not in message and "circuit_breaker" not in message


def test_a_report_without_errors_passes_breaches_included() -> None:
    """Breached, ok and no-data checks measured work: refuse_errors lets the report through."""
    judged = {k: c for k, c in ERRORED.items() if c["status"] != "error"}
    refuse_errors("joelclaw 20M: check --format json", judged)


def test_a_benchmark_refusing_a_report_exits_non_zero_with_one_line_naming_the_checks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The entry point prints one line on stderr naming the checks, no ratio on stdout, and
    exits non-zero."""

    def main() -> int:
        refuse_errors("otel_logs 5M: the state run", ERRORED)
        print("state 0.24x floor")
        return 0

    assert exit_code(main) == EXIT != 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("benchmark refused: otel_logs 5M: the state run: 2 check(s) in error")


def test_the_in_process_measure_refuses_a_run_whose_checks_error(
    store: Store, tmp_path: Path
) -> None:
    """Bench.measure times the real run; a state that is not there makes the session checks
    `error`, and the bench stops naming them rather than report `suite_over_floor`."""
    table = unique_table()
    every_check().write(store, table)
    config: dict[str, Any] = {"source": {"state": "nowhere.session_state"}}
    settings = settings_for(table, config)
    bench = Bench(directory=tmp_path, reps=1, store=store)
    with pytest.raises(ErroredChecks) as refused:
        bench.measure(settings, window_at(settings, T0 + 4 * H))
    assert "recall_coverage" in refused.value.checks
    assert "nowhere.session_state" in refused.value.checks["recall_coverage"]
