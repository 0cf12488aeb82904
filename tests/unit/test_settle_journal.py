"""The settle journal (scheduler/store/journal.py): a restarted server gets the last
settle writes again; the same server lets them go."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import StoreError, StoreUnavailable
from scheduler import metrics
from scheduler.store import journal as store_journal
from scheduler.store.journal import SettleJournal
from tests.support.processes import wait_for


class Server:
    """A stand-in for the database: its start time, and the statements it ran."""

    def __init__(self) -> None:
        self.started = 1
        self.down = False
        self.ran: list[dict[str, Any]] = []
        self.asked = 0

    def start_time(self) -> int:
        self.asked += 1
        if self.down:
            raise StoreUnavailable("down")
        return self.started

    def execute(self, _what: str, _stmt: Any, params: dict[str, Any]) -> tuple[None, int]:
        if self.down:
            raise StoreUnavailable("down")
        self.ran.append(params)
        return None, 1


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_journal, "CHECK_EVERY", 0.05)
    monkeypatch.setattr(store_journal, "KEEP", 0.2)


def test_writes_before_a_restart_are_written_again_once_it_is_back() -> None:
    server = Server()
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    journal.record("finish", object(), {"key": "a"})
    journal.record("finish", object(), {"key": "b"})
    server.down, server.started = True, 2  # crashed, restarting
    asked = server.asked
    try:
        wait_for(lambda: server.asked >= asked + 2, 5, "checks while it is down")
        assert server.ran == []
        server.down = False
        wait_for(lambda: len(server.ran) == 2, 5, "both writes again")
        assert [p["key"] for p in server.ran] == ["a", "b"]
        wait_for(lambda: not journal._entries, 5, "the journal emptied")
    finally:
        journal.close()


def test_the_same_server_lets_the_writes_go_without_writing_them_again() -> None:
    server = Server()
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    journal.record("finish", object(), {"key": "a"})
    try:
        wait_for(lambda: not journal._entries, 5, "the write forgotten")
        assert server.ran == []
    finally:
        journal.close()


def test_a_crash_without_restart_is_told_by_any_change_of_identity() -> None:
    # A backend's crash keeps the postmaster's start time but resets the statistics:
    # the identity is a tuple, and a change in any part of it means "write again".
    server = Server()
    identity = [(1, "stats-reset-1", 0)]
    journal = SettleJournal(server.execute, lambda: identity[0])
    journal.before_write()
    journal.record("finish", object(), {"key": "a"})
    identity[0] = (1, "stats-reset-2", 0)
    try:
        wait_for(lambda: len(server.ran) == 1, 5, "the write again after a crash recovery")
        journal.record("finish", object(), {"key": "b"})
        identity[0] = (1, "stats-reset-2", 1)  # one of this process's connections broke
        wait_for(lambda: [p["key"] for p in server.ran] == ["a", "b"], 5,
                 "the write again after a broken connection")
    finally:
        journal.close()


class Flaky(Server):
    """A server whose identity read fails with a bug-like error a few times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def start_time(self) -> int:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("not a StoreError")
        return super().start_time()


def test_the_watcher_survives_any_error_and_says_what_it_does_next(
        caplog: pytest.LogCaptureFixture) -> None:
    server = Flaky(failures=0)
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    server.failures = 3
    journal.record("finish", object(), {"key": "a"})
    try:
        wait_for(lambda: server.failures == 0 and not journal._entries, 5,
                 "the write forgotten after three failed checks")
        assert journal._thread is not None and journal._thread.is_alive()
        warned = [r for r in caplog.records if "checking the database failed" in r.message]
        assert len(warned) == 3 and all(r.levelname == "WARNING" for r in warned)
        assert "checking again in" in warned[0].message
    finally:
        journal.close()


def test_a_watcher_that_is_gone_is_started_again_by_the_next_write() -> None:
    server = Server()
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    journal.record("finish", object(), {"key": "a"})
    first = journal._thread
    assert first is not None
    journal.close()
    first.join(5)
    assert not first.is_alive()
    journal._closed.clear()
    journal.record("finish", object(), {"key": "b"})
    try:
        assert journal._thread is not first and journal._thread.is_alive()
        wait_for(lambda: not journal._entries, 5, "both writes forgotten")
    finally:
        journal.close()


def test_its_entries_are_bounded_when_checks_keep_failing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(store_journal, "MAX_ENTRIES", 10)
    server = Flaky(failures=0)
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    server.failures = 10**9
    before = metrics.SETTLES_UNGUARDED._value.get()
    try:
        for i in range(25):
            journal.record("finish", object(), {"key": str(i)})
        assert len(journal._entries) == 10
        assert [e.params["key"] for e in journal._entries] == [str(i) for i in range(15, 25)]
        assert metrics.SETTLES_UNGUARDED._value.get() - before == 15
        assert sum("letting the oldest go unchecked" in r.message for r in caplog.records) == 1
    finally:
        journal.close()


class OnePoison(Server):
    """A server on which one write fails for itself (not an outage)."""

    def execute(self, what: str, stmt: Any, params: dict[str, Any]) -> tuple[None, int]:
        if params["key"] == "bad":
            raise StoreError("a data error in this one write")
        return super().execute(what, stmt, params)


def test_one_write_that_fails_for_itself_does_not_hold_the_others_back() -> None:
    server = OnePoison()
    journal = SettleJournal(server.execute, server.start_time)
    journal.before_write()
    for key in ("a", "bad", "c"):
        journal.record("finish", object(), {"key": key})
    server.started = 2  # restarted
    try:
        wait_for(lambda: not journal._entries, 5, "the journal emptied")
        assert [p["key"] for p in server.ran] == ["a", "c"]
    finally:
        journal.close()
