"""A full spool disk: the receiver says 503, the spool drains, the daemon judges, stops and starts.

The spool lives on a small tmpfs mounted in a private mount namespace
(`unshare -rm`): the daemon runs inside it, under a shell that mounts the
filesystem first and, once the daemon has exited, lists the files left in
the spool into a file the test reads. The store is on the ordinary disk.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.processes import (
    BIN,
    REPO,
    clean_env,
    free_port,
    post_logs,
    query,
    records_request,
)

pytestmark = pytest.mark.slow

WRAPPER = """
set -u
mount -t tmpfs -o size={size} tmpfs {spool}
if [ -n "{fill}" ]; then dd if=/dev/zero of={spool}/filler bs=64k 2>/dev/null; fi
{daemon} > /dev/null 2> {log} &
echo $! > {pidfile}
if [ -n "{fill}" ]; then
  while [ ! -e {release} ]; do sleep 0.05; done
  rm -f {spool}/filler
fi
wait $!
code=$?
find {spool} -type f -printf '%P %s\\n' > {left}
exit $code
"""


def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    return done.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _namespaces(),
    reason="needs `unshare -rm` (user and mount namespaces, util-linux) to mount a small tmpfs",
)


class Namespaced:
    """`memory-watchdog daemon` with its spool on a tmpfs of `size`, in a namespace of its own."""

    def __init__(self, tmp: Path, size: str, *, fill: bool = False, http: bool = False) -> None:
        self.tmp, self.port, self.web = tmp, free_port(), free_port()
        self.spool = tmp / "spool"
        self.spool.mkdir()
        self.env = clean_env(tmp / "xdg")
        config = tmp / "watchdog.toml"
        config.write_text(
            f'[schedule]\nevery = "1h"\n\n[ingest]\nload_every = "1h"\nspool_dir = "{self.spool}"\n',
            encoding="utf-8",
        )
        daemon = [str(BIN), "daemon", "--config", str(config), "--otlp", f"127.0.0.1:{self.port}"]
        if http:
            daemon += ["--http", f"127.0.0.1:{self.web}"]
        self.log, self.pidfile = tmp / "daemon.log", tmp / "daemon.pid"
        self.release, self.left = tmp / "release", tmp / "left.txt"
        script = WRAPPER.format(
            size=size,
            spool=self.spool,
            fill="yes" if fill else "",
            daemon=" ".join(daemon),
            log=self.log,
            pidfile=self.pidfile,
            release=self.release,
            left=self.left,
        )
        self.proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script], env=self.env, cwd=REPO)

    def wait_for(self, text: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while text not in (self.log.read_text() if self.log.exists() else ""):
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, f"never logged {text!r}: {self.text()}"
            time.sleep(0.05)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else "(no log)"

    def post(self, body: bytes) -> int:
        return post_logs(self.port, body)

    def get(self, path: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.web, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def stop(self) -> int:
        """SIGTERM to the daemon; its exit code (the wrapper's), once the spool is listed."""
        self.wait_for("daemon started")
        os.kill(int(self.pidfile.read_text()), signal.SIGTERM)
        return self.proc.wait(timeout=180)

    def kill(self) -> None:
        """End the daemon and its shell, if a test failed before stopping them."""
        if self.proc.poll() is not None:
            return
        self.release.touch()
        if self.pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(self.pidfile.read_text()), signal.SIGKILL)
        self.proc.kill()
        self.proc.wait(timeout=60)

    def files_left(self) -> dict[str, int]:
        lines = self.left.read_text().splitlines()
        return {name: int(size) for name, size in (line.rsplit(" ", 1) for line in lines)}


@pytest.fixture
def namespaced() -> Iterator[Callable[..., Namespaced]]:
    """Start Namespaced daemons; any still running at the end of the test is killed."""
    started: list[Namespaced] = []

    def start(*args: Any, **kwargs: Any) -> Namespaced:
        started.append(Namespaced(*args, **kwargs))
        return started[-1]

    yield start
    for daemon in started:
        daemon.kill()


def _records(acknowledged: list[int]) -> list[str]:
    return sorted(f"0-{seq}-{k}" for seq in acknowledged for k in range(20))


@needs_namespaces
def test_a_full_spool_disk_is_a_503_and_what_was_acknowledged_still_drains(
    tmp_path: Path, namespaced: Callable[..., Namespaced]
) -> None:
    """Requests until the spool's filesystem is full: 200s, then 503s; on SIGTERM the spool drains
    into the store with no room left (the kept reserve), the daemon exits 0, every acknowledged
    record is stored once, and no half-written or empty file is left behind."""
    daemon = namespaced(tmp_path, "3m")
    daemon.wait_for("receiving OTLP/HTTP on")
    acknowledged, refused = [], 0
    for seq in range(5000):
        status = daemon.post(records_request(0, seq, 20))
        if status == 200:
            acknowledged.append(seq)
        else:
            assert status == 503, status
            refused += 1
            if refused >= 3:
                break
    assert acknowledged and refused == 3, (len(acknowledged), refused)
    assert daemon.stop() == 0, daemon.text()
    left = daemon.files_left()
    assert not [name for name in left if name.endswith(".tmp")], left
    assert not [name for name, size in left.items() if size == 0], left
    assert not [name for name in left if name.startswith(("batches/", "loads/"))], left
    assert "Traceback" not in daemon.text()
    store = f"chdb://{tmp_path / 'xdg' / 'memory-watchdog' / 'store'}"
    stored = query(store, "SELECT LogAttributes['record.id'] FROM otel.otel_logs", daemon.env)
    assert sorted(row[0] for row in stored) == _records(acknowledged)


@needs_namespaces
def test_a_spool_full_at_start_leaves_the_daemon_judging_and_says_so(
    tmp_path: Path, namespaced: Callable[..., Namespaced]
) -> None:
    """The spool's filesystem full before the daemon starts: it starts, judges its window, answers
    503, says so in /healthz, /status (its `ingest` block) and /metrics; once there is room it accepts again; SIGTERM exits 0."""
    daemon = namespaced(tmp_path, "3m", fill=True, http=True)
    daemon.wait_for("daemon started")
    daemon.wait_for("judged [")
    assert daemon.post(records_request(0, 0, 20)) == 503
    deadline = time.monotonic() + 60
    while (health := json.loads(daemon.get("/healthz")[1]))["status"] == "no_run":
        assert time.monotonic() < deadline, daemon.text()  # the first tick records its run
        time.sleep(0.1)
    assert daemon.get("/healthz")[0] == 503
    assert health["status"] == "spool" and "full" in health["ingest"]["problem"]
    code, text = daemon.get("/status")
    assert code == 200, text
    assert json.loads(text)["ingest"] == {
        "directory": str(daemon.spool),
        "status": "unwritable",
        "problem": f"the filesystem of {daemon.spool} is full: accepting nothing new",
        "queued_requests": 0,
        "queued_bytes": 0,
        "quarantined_requests": 0,
        "free_bytes": 0,
    }
    metrics = daemon.get("/metrics")[1]
    assert "memory_watchdog_ingest_spool_writable 0.0" in metrics
    daemon.release.touch()  # the wrapper removes the filler
    deadline = time.monotonic() + 60
    while daemon.post(records_request(0, 1, 20)) != 200:
        assert time.monotonic() < deadline, daemon.text()
        time.sleep(0.2)
    assert json.loads(daemon.get("/healthz")[1])["ingest"]["status"] == "ok"
    ingest = json.loads(daemon.get("/status")[1])["ingest"]
    assert (ingest["status"], ingest["problem"], ingest["queued_requests"]) == ("ok", None, 1)
    assert daemon.stop() == 0, daemon.text()
    assert "Traceback" not in daemon.text() and "internal error" not in daemon.text()
    store = f"chdb://{tmp_path / 'xdg' / 'memory-watchdog' / 'store'}"
    stored = query(store, "SELECT LogAttributes['record.id'] FROM otel.otel_logs", daemon.env)
    assert sorted(row[0] for row in stored) == _records([1])


def in_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`script` run by sh in a private user and mount namespace (its mounts vanish with it),
    in a clean environment whose data directory is under `tmp_path`."""
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )


STATUS = """
set -eu
mount -t tmpfs -o size=2m tmpfs {spool}
{prepare}
{bin} status --config {config} > {text}
{bin} status --config {config} --format json > {json}
"""
QUEUED = """
mkdir {spool}/batches {spool}/quarantine
head -c 100 /dev/zero > {spool}/batches/logs-a.jsonl
head -c 50 /dev/zero > {spool}/batches/traces-b.jsonl
head -c 10 /dev/zero > {spool}/quarantine/logs-c.jsonl
"""
FILL = "dd if=/dev/zero of={spool}/filler bs=64k 2>/dev/null || true"


def status_of_spool(tmp_path: Path, prepare: str) -> tuple[str, dict[str, Any]]:
    """`memory-watchdog status` (text, then JSON) with `[ingest]` set and its spool on a 2 MiB
    tmpfs made ready by the shell lines `prepare`: the receiver spool's line and `ingest` block."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (tmp_path / "xdg" / "memory-watchdog" / "store").mkdir(parents=True)  # an empty store
    config = tmp_path / "watchdog.toml"
    config.write_text(f'[ingest]\nlisten = "127.0.0.1:{free_port()}"\nspool_dir = "{spool}"\n')
    text, document = tmp_path / "status.txt", tmp_path / "status.json"
    script = STATUS.format(
        spool=spool,
        prepare=prepare.format(spool=spool),
        bin=BIN,
        config=config,
        text=text,
        json=document,
    )
    done = in_namespace(script, tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in text.read_text().splitlines() if ln.startswith("Receiver spool")]
    return line, json.loads(document.read_text())["ingest"]


@needs_namespaces
def test_status_says_a_full_spool_cannot_accept(tmp_path: Path) -> None:
    """`status` with the spool's filesystem full (and no room set aside): the receiver spool's
    line and the JSON `ingest` block say it cannot accept, why, and what waits in it."""
    line, ingest = status_of_spool(tmp_path, QUEUED + FILL)
    spool = tmp_path / "spool"
    assert line == (
        f"Receiver spool {spool}: CANNOT ACCEPT: the filesystem of {spool} is full;"
        " 2 request(s), 150 bytes waiting to load; 1 set aside in quarantine/"
    )
    assert ingest == {
        "directory": str(spool),
        "status": "unwritable",
        "problem": f"the filesystem of {spool} is full",
        "queued_requests": 2,
        "queued_bytes": 150,
        "quarantined_requests": 1,
        "free_bytes": 0,
    }


@needs_namespaces
def test_status_says_a_read_only_spool_cannot_accept(tmp_path: Path) -> None:
    """`status` with the spool's filesystem read-only: the line and the `ingest` block say the
    directory is not writable, and what waits in it."""
    line, ingest = status_of_spool(tmp_path, QUEUED + "mount -o remount,ro {spool}")
    spool = tmp_path / "spool"
    assert line == (
        f"Receiver spool {spool}: CANNOT ACCEPT: {spool} is not writable;"
        " 2 request(s), 150 bytes waiting to load; 1 set aside in quarantine/"
    )
    assert (ingest["status"], ingest["problem"]) == ("unwritable", f"{spool} is not writable")
    assert (ingest["queued_requests"], ingest["quarantined_requests"]) == (2, 1)


@needs_namespaces
def test_status_says_a_full_spool_cannot_accept_though_its_reserve_is_set_aside(
    tmp_path: Path,
) -> None:
    """The spool of a daemon that ran: its reserve (kept for draining, never for new requests)
    set aside, then the filesystem filled. `status` says it cannot accept, as the receiver
    answers 503 (it said `ok`: the reserve was taken for room)."""
    line, ingest = status_of_spool(tmp_path, "head -c 1048576 /dev/zero > {spool}/reserve\n" + FILL)
    spool = tmp_path / "spool"
    assert line == (
        f"Receiver spool {spool}: CANNOT ACCEPT: the filesystem of {spool} is full;"
        " 0 request(s), 0 bytes waiting to load"
    )
    assert (ingest["status"], ingest["free_bytes"]) == ("unwritable", 0)


@needs_namespaces
def test_a_read_only_spool_is_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    """A spool directory on a read-only filesystem: exit 2 and one line naming ingest.spool_dir
    and the directory (it was "internal error", exit 1)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    config = tmp_path / "watchdog.toml"
    config.write_text(f'[ingest]\nlisten = "127.0.0.1:{free_port()}"\nspool_dir = "{spool}"\n')
    script = f"mount -t tmpfs -o ro,size=1m tmpfs {spool} && exec {BIN} daemon --config {config}"
    done = in_namespace(script, tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ingest.spool_dir" in line and str(spool) in line and "Read-only" in line


def test_a_spool_that_is_no_directory_is_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    """`spool_dir` under a file (or any path that cannot be a directory), with a control character
    in its name: exit 2, one line naming the key and the path, the character escaped."""
    (tmp_path / "a\x1bfile").write_text("not a directory")
    config = tmp_path / "watchdog.toml"
    spool = json.dumps(str(tmp_path / "a\x1bfile" / "spool"))
    config.write_text(f'[ingest]\nlisten = "127.0.0.1:{free_port()}"\nspool_dir = {spool}\n')
    done = subprocess.run(
        [str(BIN), "daemon", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(tmp_path / "xdg"),
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ingest.spool_dir" in line and "\\x1b" in line and "\x1b" not in line
