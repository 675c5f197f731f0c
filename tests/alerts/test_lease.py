"""The alert lease over ClickHouse's HTTP interface: one holder per source, standby, hand-over.

Each claimant has a client of its own on the HTTP interface that
tests/faults/chserver.py serves from the session's engine, as two processes
would. tests/faults/test_process_faults.py runs real processes against it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime

import pytest

from alerts.lease import CLAIM_SETTLE, Lease, LeaseLost, current_lease
from alerts.pipeline import process
from alerts.testing import RecordingNotifier
from checks.base import Status
from tests.alerts.conftest import T0, H, make_settings, report
from tests.faults.chserver import ClickHouseHTTPServer
from tests.faults.proxy import FaultProxy
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_store
from watchdog.core.times import from_ms

TTL = {"alerts": {"lease_ttl": "3s", "delivery_timeout": "1s"}}
# A lease that expires soon after its holder stops renewing it, for the tests that wait for it.
SHORT_TTL = {"alerts": {"lease_ttl": "600ms", "delivery_timeout": "300ms"}}


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait until `condition()` holds (checked every 20 ms), failing after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "the condition never held"
        threading.Event().wait(0.02)


def no_settle(seconds: float) -> None:
    """A claim's settle time: nothing to wait for on one server, where a write lands at once."""


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[ClickHouseHTTPServer]:
    with ClickHouseHTTPServer(store) as served:
        yield served


@pytest.fixture
def clients(server: ClickHouseHTTPServer) -> Iterator[tuple[Store, Store]]:
    """Two clients of the HTTP interface: two would-be holders."""
    url = f"http://default@127.0.0.1:{server.port}/default"
    with open_store(url) as first, open_store(url) as second:
        yield first, second


@pytest.fixture
def settings() -> Settings:
    return make_settings(TTL)


def test_the_second_claimant_is_standby_and_names_the_holder(
    clients: tuple[Store, Store], settings: Settings
) -> None:
    """While one process holds the lease, another is told who holds it and until when."""
    first, second = clients
    holder = Lease(first, settings, "db1 daemon[1]", sleep=no_settle)
    other = Lease(second, settings, "db2 check[2]", sleep=no_settle)
    assert holder.acquire() is None and holder.held
    standby = other.acquire()
    assert standby is not None and not other.held
    assert standby.holder == "db1 daemon[1]" and standby.live
    assert "db1 daemon[1] holds the alert lease of" in standby.describe()


def test_a_released_lease_is_taken_at_once(
    clients: tuple[Store, Store], settings: Settings
) -> None:
    """A holder that finished releases the lease: the next claimant holds it without waiting."""
    first, second = clients
    holder, other = Lease(first, settings, "a", sleep=no_settle), Lease(second, settings, "b")
    assert holder.acquire() is None
    holder.release()
    assert other.acquire() is None and other.held


def test_a_dead_holders_lease_passes_on_when_it_expires(clients: tuple[Store, Store]) -> None:
    """A holder that died (no release) blocks others until its lease expires, then hands over."""
    first, second = clients
    settings = make_settings(SHORT_TTL)
    dead = Lease(first, settings, "dead", sleep=no_settle)
    other = Lease(second, settings, "next", sleep=no_settle)
    assert dead.acquire() is None
    assert other.acquire() is not None  # live: standby
    source = settings.source.display_name
    wait_until(lambda: not _live(first, settings, source))  # the TTL, by the store's clock
    assert other.acquire() is None and other.held
    with pytest.raises(LeaseLost, match="next holds the alert lease"):
        dead.ensure()  # had it come back: it is told it lost the lease


def test_a_holder_keeps_the_lease_past_its_ttl_by_renewing_it(
    clients: tuple[Store, Store],
) -> None:
    """A run longer than the TTL keeps the lease: each checkpoint renews it in time."""
    first, second = clients
    settings = make_settings(SHORT_TTL)
    holder = Lease(first, settings, "long run", sleep=no_settle)
    other = Lease(second, settings, "other", sleep=no_settle)
    assert holder.acquire() is None
    claimed = current_lease(first, settings, settings.source.display_name)
    assert claimed is not None

    def checkpoint_past_the_first_expiry() -> bool:
        holder.ensure()  # the checkpoint of a long run: renews when half the TTL is gone
        return _store_now(first) > claimed.expires_at

    wait_until(checkpoint_past_the_first_expiry)
    assert other.acquire() is not None
    info = current_lease(first, settings, settings.source.display_name)
    # Renewed past its first expiry, and live when the other asked (it was refused). Not `live`
    # now: a loaded machine may let the 600 ms lease lapse between the two reads.
    assert info is not None and info.holder == "long run"
    assert info.expires_at > claimed.expires_at


def test_concurrent_claims_elect_exactly_one_holder(
    clients: tuple[Store, Store], settings: Settings
) -> None:
    """Two processes claiming a free lease at the same moment: exactly one holds it, every time."""
    first, second = clients
    for round_ in range(6):
        leases = _claim_at_once(settings, (first, f"a{round_}"), (second, f"b{round_}"))
        assert [lease.held for lease in leases].count(True) == 1, round_
        for lease in leases:
            lease.release()


def _claim_at_once(settings: Settings, *claimants: tuple[Store, str]) -> list[Lease]:
    """The claimants' leases claimed from one thread each, started by one barrier at once.

    Each claimant reads who won only once every other has written its claim or found the
    lease taken: the purpose of the settle time, as a condition rather than half a second.
    """
    start, written = threading.Barrier(len(claimants)), threading.Barrier(len(claimants))
    waited: set[int] = set()

    def settle(index: int) -> None:
        waited.add(index)
        written.wait(timeout=30)

    leases = [
        Lease(store, settings, name, sleep=lambda seconds, i=index: settle(i))
        for index, (store, name) in enumerate(claimants)
    ]

    def claim(index: int, lease: Lease) -> None:
        start.wait(timeout=30)
        lease.acquire()
        if index not in waited:  # standby without claiming: the others may read now
            written.wait(timeout=30)

    threads = [threading.Thread(target=claim, args=pair) for pair in enumerate(leases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return leases


# What ClickHouse answers a quorum insert while the previous one has not reached its quorum.
QUORUM_REFUSED = (
    "Code: 286. DB::Exception: Quorum for previous write has not been satisfied yet."
    " (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE) (version 24.8.4.13 (official build))"
)


def test_a_claim_refused_while_a_rival_claims_is_standby_not_a_store_failure(
    server: ClickHouseHTTPServer, settings: Settings
) -> None:
    """A claim the server refuses while another process claims the same lease is a lost race."""
    url = "http://default@127.0.0.1:{port}/default"
    with (
        FaultProxy(server.port, error_code=286, error_message=QUORUM_REFUSED) as proxy,
        open_store(url.format(port=proxy.port)) as mine,
        open_store(url.format(port=server.port)) as theirs,
    ):
        rival = Lease(theirs, settings, "rival", sleep=no_settle)

        def the_rival_claims_first() -> float:  # called just before our claim is written
            assert rival.acquire() is None
            proxy.set_mode("http_500")  # our claim is refused, as a quorum in flight refuses it
            return time.monotonic()

        def settle(seconds: float) -> None:
            proxy.set_mode("pass")  # the rival's claim has landed: nothing to wait for

        me = Lease(mine, settings, "me", clock=the_rival_claims_first, sleep=settle)
        holder = me.acquire()
        assert holder is not None and holder.holder == "rival" and not me.held
        rival.release()


def test_a_refused_claim_with_no_rival_is_the_store_failing(
    server: ClickHouseHTTPServer, settings: Settings
) -> None:
    """A claim the server refuses while nobody else holds the lease is a store error, said as one."""
    with (
        FaultProxy(server.port) as proxy,
        open_store(f"http://default@127.0.0.1:{proxy.port}/default") as mine,
    ):

        def refuse_the_claim() -> float:  # called just before the claim is written
            proxy.set_mode("http_500")
            return time.monotonic()

        def settle(seconds: float) -> None:
            proxy.set_mode("pass")  # the store answers again: nobody else claimed
            assert seconds == CLAIM_SETTLE

        me = Lease(mine, settings, "me", clock=refuse_the_claim, sleep=settle)
        with pytest.raises(StoreError, match="MEMORY_LIMIT_EXCEEDED"):
            me.acquire()
        assert not me.held


def test_a_standby_process_records_and_sends_nothing(
    clients: tuple[Store, Store], settings: Settings
) -> None:
    """The pipeline under a lease another process holds stops before the lifecycle: no state moves."""
    first, second = clients
    holder = Lease(first, settings, "holder", sleep=no_settle)
    other = Lease(second, settings, "standby", sleep=no_settle)
    assert holder.acquire() is None and other.acquire() is not None
    chat = RecordingNotifier()
    with pytest.raises(LeaseLost):
        process(
            second,
            settings,
            report(T0, {"recall_coverage": Status.BREACHED}),
            now=T0 + H,
            notifiers={chat.name: chat},
            guard=other.ensure,
        )
    assert chat.sent == []
    outcome = process(
        first,
        settings,
        report(T0, {"recall_coverage": Status.BREACHED}),
        now=T0 + H,
        notifiers={chat.name: chat},
        guard=holder.ensure,
    )
    assert len(outcome.delivery.delivered) == 1 and len(chat.sent) == 1


def _store_now(store: Store) -> datetime:
    """The store's clock, which the lease's times are in."""
    rows = store.query("SELECT toUnixTimestamp64Milli(now64(3))").rows
    return from_ms(int(rows[0][0]))


def _live(store: Store, settings: Settings, source: str) -> bool:
    lease = current_lease(store, settings, source)
    return lease is not None and lease.live


def test_the_embedded_store_needs_no_lease(store: Store, settings: Settings) -> None:
    """On the embedded store (one process at a time by its lock) the lease writes nothing."""
    assert Lease(store, settings, "a").acquire() is None
    assert Lease(store, settings, "b").acquire() is None
    assert current_lease(store, settings, settings.source.display_name) is None
