"""Fill reservations: several schedulers' lanes fill one bucket at once, and the
batches in flight count against the watermark until they are done."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from scheduler.store import DueStore
from scheduler.store.fill_lock import FillLocks
from tests.support.processes import wait_for

CAP, BATCH = 3000, 1000


@pytest.fixture
def two_schedulers(fresh_pg_url: str) -> Iterator[tuple[FillLocks, FillLocks]]:
    """The fill locks of two schedulers on one store (two connections)."""
    stores = [DueStore.open(fresh_pg_url), DueStore.open(fresh_pg_url)]
    locks = (FillLocks(stores[0]), FillLocks(stores[1]))
    yield locks
    for lock, store in zip(locks, stores, strict=True):
        lock.close()
        store.close()


def test_batches_in_flight_of_every_scheduler_use_the_room(
        two_schedulers: tuple[FillLocks, FillLocks]) -> None:
    first, second = two_schedulers
    assert first.reserve("short", 0, BATCH, BATCH, CAP, lambda: 0) == BATCH
    assert second.reserve("short", 0, BATCH, BATCH, CAP, lambda: 0) == BATCH
    assert first.reserve("short", 1, BATCH, BATCH, CAP, lambda: 1500) == 0  # + 2 in flight
    assert second.reserve("short", 1, BATCH, BATCH, CAP, lambda: 0) == BATCH
    assert first.reserve("short", 2, BATCH, BATCH, CAP, lambda: 0) == 0  # three in flight
    assert first.reserve("medium", 0, BATCH, BATCH, CAP, lambda: 0) == BATCH  # its own room
    first.release("short", 0)
    assert first.reserve("short", 2, BATCH, BATCH, CAP, lambda: 500) == 500


def test_a_dead_schedulers_batches_no_longer_count(
        two_schedulers: tuple[FillLocks, FillLocks]) -> None:
    first, second = two_schedulers
    for lane in range(3):
        assert first.reserve("short", lane, BATCH, BATCH, CAP, lambda: 0) == BATCH
    assert second.reserve("short", 0, BATCH, BATCH, CAP, lambda: 0) == 0
    first.close()  # its connection is gone, as when the process is killed
    # The server drops a closed connection's locks when its backend exits, a moment
    # after the client closed: wait for that (a reservation that finds no room marks
    # nothing), then the dead scheduler's three batches no longer count.
    wait_for(lambda: second.reserve("short", 0, BATCH, BATCH, CAP, lambda: 0) == BATCH,
             10, "the closed connection's batches to be released")


def test_the_fill_lock_is_held_only_while_the_room_is_read(
        two_schedulers: tuple[FillLocks, FillLocks]) -> None:
    """A reservation that reads a slow depth holds up the other scheduler's
    reservation for that long, not for the batch that follows it."""
    first, second = two_schedulers
    entered, waited = threading.Event(), []

    def slow_depth() -> int:
        entered.set()
        time.sleep(0.5)
        return 0

    reader = threading.Thread(target=first.reserve,
                              args=("short", 0, BATCH, BATCH, CAP, slow_depth))
    reader.start()
    entered.wait(5)
    t0 = time.monotonic()
    assert second.reserve("short", 0, BATCH, BATCH, CAP, lambda: 0) == BATCH
    waited.append(time.monotonic() - t0)
    reader.join()
    assert 0.2 < waited[0] < 3.0  # it waited for the reading, then got its batch
    assert second.reserve("short", 1, BATCH, BATCH, CAP, lambda: 0) == BATCH  # no wait now
