"""What a new user meets in the first week on call (issue 46), each as the user meets it.

Real processes of the console script, on embedded stores of their own, in a fresh HOME where the
README path is followed: a hint that leads into a dead end, a line that names the wrong thing
or a file an installed copy lacks, a command of the README that does not run as printed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_env import clean_env
from tests.readme_demo import (
    GROUP,
    SETUP,
    SHELL,
    after_make_demo,
    bash,
    copy_of,
    naming,
    readme_block_after,
)

BIN = Path(sys.executable).parent / "memory-watchdog"
REPO = Path(__file__).parents[1]
README_AT = "2026-11-28T04:00:00Z"  # the time of the README's demo

pytestmark = pytest.mark.slow

# A store whose one session started without recall: `check` breaches recall_coverage.
BREACHED_STORE = """
import sys
from tests.builder import H, S, T0, Scenario
from watchdog.core.store import open_store
sc = Scenario()
sc.session("cold").starts(T0 + 3 * H).ends(T0 + 3 * H + 600 * S)
with open_store(sys.argv[1], create=True) as store:
    sc.write(store, "joelclaw.otel_events")
"""

# A store holding the OTLP receiver's logs table: the default source is then that table's.
RECEIVER_STORE = """
import sys
from watchdog.core.store import open_store
with open_store(sys.argv[1], create=True) as store:
    store.command("CREATE DATABASE IF NOT EXISTS otel")
    store.command("CREATE TABLE otel.otel_logs (x UInt8) ENGINE = MergeTree ORDER BY x")
"""


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or clean_env(Path("/nonexistent-xdg")),
        cwd=cwd,
        check=False,
    )


def made_store(path: Path, script: str) -> str:
    """A store written by `script` in a process of its own (this one holds the test store)."""
    url = f"chdb://{path}"
    env = clean_env(path.parent / f"{path.name}-xdg")
    subprocess.run([sys.executable, "-c", script, url], check=True, cwd=REPO, env=env)
    return url


@pytest.fixture(scope="module")
def breached_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A BREACHED_STORE, shared by the tests that only read it (`check` without --notify)."""
    return made_store(tmp_path_factory.mktemp("breached") / "store", BREACHED_STORE)


@pytest.fixture(scope="module")
def notified_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A BREACHED_STORE after `check --notify` at the README's time, no receiver configured:
    recall_coverage fired (exit 1), nothing sent. Its tests only read it."""
    store = made_store(tmp_path_factory.mktemp("notified") / "store", BREACHED_STORE)
    assert cli("check", "--notify", "--at", README_AT, "--store", store).returncode == 1
    return store


@pytest.fixture
def after_readme(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> dict[str, str]:
    """A shell of a new user after `make demo` and the README's lines (a copy of its own)."""
    return copy_of(after_make_demo(tmp_path_factory), tmp_path / "home")


def quoted(text: str) -> list[str]:
    """The commands a line quotes between backticks."""
    return re.findall(r"`(memory-watchdog [^`]*)`", text)


# ---- point 2: a way back after `check --notify` at now on the demo store --------------------


@GROUP
def test_the_documented_reset_lets_the_readmes_replay_judge_again(
    after_readme: dict[str, str],
) -> None:
    """The README's demo, then the command `alerts` suggests (`check --notify`, at now): the
    README's `check --notify --at` says "already processed" and names `alerts reset`; after
    `alerts reset --yes` as named, the same command judges the demo's window and fires."""
    env, shell = after_readme, SHELL
    hint = bash(f"{shell}\nmemory-watchdog alerts", env)
    assert hint.returncode == 0, hint.stderr
    (suggested,) = quoted(hint.stdout)
    assert " check --notify" in suggested
    replay = f"memory-watchdog check --notify --at {README_AT} >/dev/null"
    first = bash(f"{shell}\n{suggested} >/dev/null\n{replay}", env)
    assert "already processed" in first.stderr, first.stderr
    (reset,) = [c for c in quoted(first.stderr) if " alerts reset" in c]
    said = bash(f"{shell}\n{reset}", env)
    assert "--yes" in said.stdout and "not touched" in said.stdout, said.stdout
    confirmed = bash(f"{shell}\n{reset} --yes", env)
    assert confirmed.returncode == 0 and "cleared" in confirmed.stdout, confirmed.stderr
    again = bash(f"{shell}\n{replay}", env)
    assert "already processed" not in again.stderr
    assert "alerts: fired recall_coverage" in again.stderr, again.stderr


@GROUP
def test_the_demo_starts_its_alerts_over(after_readme: dict[str, str]) -> None:
    """`check --notify` at now on the demo store, then the demo again: the README's
    `check --notify --at` judges the demo's window (the demo cleared its source's alert state)."""
    env = after_readme  # the README's demo ran
    done = bash(
        f"{SHELL}\nmemory-watchdog check --notify >/dev/null\n{SETUP}\n"
        f"memory-watchdog check --notify --at {README_AT} >/dev/null",
        env,
    )
    assert "already processed" not in done.stderr
    assert "alerts: fired recall_coverage" in done.stderr, done.stderr


def test_reset_without_yes_clears_nothing(notified_store: str) -> None:
    """`alerts reset` says what it would clear and how to confirm; the states stay."""
    store = notified_store
    said = cli("alerts", "reset", "--store", store)
    assert said.returncode == 0, said.stderr
    assert "would clear, of source joelclaw.otel_events" in said.stdout
    assert f"memory-watchdog alerts reset --store {store} --yes" in said.stdout
    listed = cli("alerts", "--store", store)
    assert "recall_coverage" in listed.stdout and "firing" in listed.stdout


@GROUP
def test_a_copy_names_no_path_of_its_template(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The tests after the README's demo work on a copy of one HOME: no file of the copy names
    the template's HOME (the demo's pointer names the copy's store), so none reads or writes
    the template, or another test's state."""
    template = after_make_demo(tmp_path_factory)
    assert naming(template.home, template.home)  # the pointer and the pages name it
    copy_of(template, tmp_path / "home")
    assert naming(tmp_path / "home", template.home) == []
    pointer = tmp_path / "home/.local/share/memory-watchdog/last-demo-store"
    assert pointer.read_text(encoding="utf-8").strip() == (
        f"chdb://{tmp_path}/home/.local/share/memory-watchdog/demo-store"
    )


# ---- point 3: the README's backtest runs on the demo's data --------------------------------


@GROUP
def test_the_readmes_backtest_judges_the_demos_windows(after_readme: dict[str, str]) -> None:
    """The README's `backtest` line, after its demo: the demo's day, windows with data (not a
    week of windows before and after the data, each a freshness breach)."""
    env = after_readme  # the README's demo ran
    block = readme_block_after("### A period at once")
    (line,) = [ln for ln in block.splitlines() if ln.startswith("memory-watchdog backtest")]
    command = line.split("#")[0].strip()
    done = bash(f"{SHELL}\n{command}", env)
    assert done.returncode == 1, done.stderr  # the demo breaches
    assert "6 windows ending in" in done.stdout
    (freshness,) = [ln for ln in done.stdout.splitlines() if ln.startswith("telemetry_freshness")]
    assert freshness.split()[1:3] == ["6", "0"], freshness  # 6 windows, none breached


# ---- point 6: each line says what is so -----------------------------------------------------


def test_an_unresolvable_store_host_says_the_name_did_not_resolve() -> None:
    """A store URL whose host does not resolve: exit 3, saying so, not "connection refused"."""
    done = cli("check", "--store", "http://u:pw0rd@watchdog-test-host.invalid:8123/default")
    assert done.returncode == 3
    assert "host name could not be resolved" in done.stderr, done.stderr
    assert "refused" not in done.stderr and "pw0rd" not in done.stderr


def test_an_unresolvable_receiver_host_says_the_name_did_not_resolve(tmp_path: Path) -> None:
    """A receiver URL whose host does not resolve: notify-test says so for that receiver."""
    config = tmp_path / "watchdog.toml"
    config.write_text(
        '[alerts]\ndelivery_timeout = "2s"\n\n'
        '[alerts.webhook.ops]\nurl = "http://watchdog-test-host.invalid:9/hook"\n',
        encoding="utf-8",
    )
    done = cli("notify-test", "--config", str(config), "--store", f"chdb://{tmp_path / 's'}")
    assert done.returncode == 1
    assert "webhook.ops" in done.stdout
    assert "host name could not be resolved" in done.stdout, done.stdout


def test_alerts_shows_no_last_notified_when_nothing_was_sent(notified_store: str) -> None:
    """`check --notify` with no receiver fires an alert and sends nothing: `alerts` shows no
    LAST NOTIFIED time for it (and JSON null)."""
    store = notified_store
    listed = cli("alerts", "--store", store).stdout.splitlines()
    header = listed[0]
    (row,) = [line for line in listed if " recall_coverage " in line]
    column = header.index("LAST NOTIFIED")
    assert row[column:].split()[0] == "—", listed
    document = cli("alerts", "--format", "json", "--store", store).stdout
    assert '"last_notified": null' in document


def test_notify_test_names_the_source_status_names(tmp_path: Path) -> None:
    """In a store holding the OTLP receiver's table, notify-test's message is about the source
    `status` names (the receiver's), not the joelclaw preset's."""
    store = made_store(tmp_path / "store", RECEIVER_STORE)
    config = tmp_path / "watchdog.toml"
    config.write_text("[alerts.stdout]\nenabled = true\n", encoding="utf-8")
    status = cli("status", "--store", store)
    named = re.search(r"status: source (\S+),", status.stdout)
    assert named is not None, status.stdout
    sent = cli("notify-test", "--config", str(config), "--store", store)
    assert sent.returncode == 0, sent.stderr
    assert f"alerts about {named.group(1)} reach" in sent.stdout, (named.group(1), sent.stdout)


def test_the_demos_what_next_names_no_file_an_installed_copy_lacks(tmp_path: Path) -> None:
    """Run outside the repository (as after `pipx install`), the demo's "What next" lines give
    no --config of a file that is not there."""
    env = clean_env(tmp_path / "data")
    done = cli("demo", "--sessions", "100", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    what_next = done.stdout.split("What next:")[1].split("HTML report")[0]
    for line in what_next.strip().splitlines():
        words = shlex.split(line.split("#")[0])
        files = [words[i + 1] for i, word in enumerate(words) if word == "--config"]
        assert all((tmp_path / name).is_file() for name in files), line


@pytest.mark.parametrize("given", ["2026-11-28", "2026-11-28T04:00:00", "2026-11-28 04:00"])
def test_the_example_a_refused_time_gives_is_accepted(breached_store: str, given: str) -> None:
    """A time without its zone is refused with an example; that example is accepted."""
    store = breached_store
    refused = cli("check", "--at", given, "--store", store)
    assert refused.returncode == 2
    example = re.search(r"\(e\.g\. (\S+?)\)", refused.stderr)
    assert example is not None, refused.stderr
    assert example.group(1).startswith(given[:10])
    accepted = cli("check", "--at", example.group(1), "--store", store)
    assert accepted.returncode in (0, 1), accepted.stderr


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (("check", "--bogus"), "check"),
        (("backtest", "--last", "1d", "--bogus"), "backtest"),
        (("silence", "add", "all", "--reason", "r", "--bogus"), "silence add"),
        (("config", "check", "--bogus"), "config check"),
    ],
)
def test_a_bad_flag_hints_the_help_of_its_command(args: tuple[str, ...], command: str) -> None:
    """An unknown flag of a subcommand is exit 2, naming that subcommand's --help."""
    done = cli(*args)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        f"unrecognized arguments: --bogus (see memory-watchdog {command} --help)"
    ), done.stderr
