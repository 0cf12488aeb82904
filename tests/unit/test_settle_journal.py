"""The settle journal (scheduler/store_journal.py): a restarted server gets the last
settle writes again; the same server lets them go."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import StoreUnavailable
from scheduler import store_journal
from scheduler.store_journal import SettleJournal
from tasks.processes import wait_for


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
