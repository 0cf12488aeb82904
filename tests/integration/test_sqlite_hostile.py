"""The embedded SQLite store at a hostile path, file or URL: every command, the scheduler
and the worker say what is wrong with the file in one ``recur: ...`` line (exit code 2),
naming it, never a traceback, never "cannot reach, start it" and never waiting forever for
what no wait fixes; a store another writer holds locked, or one whose disk is full, is
waited out and loses nothing already stored nor the job being rescheduled."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from config.errors import StoreUnavailable, StoreUnusable
from config.settings import load_settings
from scheduler.service import open_store
from scheduler.store import DueStore
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from scheduler.store.records import Claimed, Job
from scheduler.store.worker_store import check_store_at_start, get_worker_store
from tasks.cli.doctor.check import FAIL
from tasks.cli.doctor.services import database_checks
from tests.support.processes import recur_argv
from tests.support.refusals import refusal_line, service_environment

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def recur(url: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        recur_argv(*argv),
        env=service_environment(RECUR_DATABASE_URL=url),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _directory(tmp: Path, _store: Path) -> Path:
    (tmp / "adir").mkdir()
    return tmp / "adir"


def _no_parent(tmp: Path, _store: Path) -> Path:
    return tmp / "missing" / "due.sqlite3"


def _random(tmp: Path, _store: Path) -> Path:
    (tmp / "random.db").write_bytes(bytes(range(256)) * 40)
    return tmp / "random.db"


def _text(tmp: Path, _store: Path) -> Path:
    (tmp / "notes.txt").write_text("not a database\n")
    return tmp / "notes.txt"


def _truncated(tmp: Path, store: Path) -> Path:
    (tmp / "cut.db").write_bytes(store.read_bytes()[: store.stat().st_size // 2])
    return tmp / "cut.db"


def _name_too_long(tmp: Path, _store: Path) -> Path:
    return tmp / ("n" * 300 + ".db")


def _path_too_long(tmp: Path, _store: Path) -> Path:
    """~4,000 characters, every directory there (SQLite said "unable to open")."""
    parent = tmp.joinpath(*["d" * 200] * 19)
    parent.mkdir(parents=True)
    return parent / "due.db"


#: (a hostile file, what the one line says of it).
HOSTILE: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "directory": (_directory, "is a directory"),
    "no parent": (_no_parent, "does not exist or is not a directory: create it"),
    "random bytes": (_random, "is not a SQLite database"),
    "text file": (_text, "is not a SQLite database"),
    "truncated store": (_truncated, "is corrupt"),
    "name too long": (_name_too_long, "cannot be looked up: File name too long"),
    "path too long": (_path_too_long, "is longer than SQLite opens"),
}


@pytest.fixture(params=list(HOSTILE))
def hostile(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path
) -> tuple[str, str]:
    """(the URL of a hostile SQLite path, what is wrong with it)."""
    make, said = HOSTILE[request.param]
    return f"sqlite:///{make(tmp_path, sqlite_template)}", said


def test_every_opener_names_the_file_and_gives_up(hostile: tuple[str, str]) -> None:
    """The scheduler's open (it waited forever: "file is not a database; retrying"), the
    worker's start check (it started, to fail every stored job's run) and the store's own
    check each raise StoreUnusable (exit 2) naming the file and what is wrong with it."""
    url, said = hostile
    stopping = threading.Event()
    timer = threading.Timer(5, stopping.set)  # an outage would be retried until then
    timer.start()
    openers = [
        lambda: open_store(load_settings({"RECUR_DATABASE_URL": url}), stopping),
        lambda: DueStore.open(url),
    ]
    if "does not exist" in said:  # no store yet: a worker that runs only published work
        assert said in str(check_store_at_start(url))  # starts, with this WARNING
    else:
        openers.append(lambda: check_store_at_start(url))
    for opener in openers:
        with pytest.raises(StoreUnusable) as refused:
            opener()
        assert said in str(refused.value) and "/" in str(refused.value), refused.value
    assert not stopping.is_set()
    timer.cancel()


def test_a_file_that_broke_after_the_start_is_an_outage_to_a_run(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """A worker checked the file at its start; a run that finds it broken since rides it
    out and hands its message back (StoreUnavailable, tasks/base.py), never fails it."""
    url = f"sqlite:///{_truncated(tmp_path, sqlite_template)}"
    with pytest.raises(StoreUnavailable, match="is corrupt"):
        get_worker_store(url)


@pytest.mark.parametrize("case", ["directory", "no parent", "random bytes", "truncated store"])
def test_upgrade_names_the_file(case: str, sqlite_template: Path, tmp_path: Path) -> None:
    """`recur db upgrade` said only "unable to open database file" of a directory or a
    missing directory."""
    make, said = HOSTILE[case]
    engine = make_engine(f"sqlite:///{make(tmp_path, sqlite_template)}")
    try:
        with pytest.raises(StoreUnusable, match=said):
            upgrade(engine)
    finally:
        engine.dispose()


def test_doctor_names_a_directory(tmp_path: Path) -> None:
    """It said "cannot reach ...: start it" of a directory."""
    (tmp_path / "adir").mkdir()
    found = database_checks(load_settings({"RECUR_DATABASE_URL": f"sqlite:///{tmp_path}/adir"}))
    assert [(c.name, c.level) for c in found] == [("database", FAIL)]
    assert "adir: is a directory" in found[0].text


@pytest.mark.parametrize("argv", [("db", "upgrade"), ("jobs", "list", "--user", "u1")])
def test_commands_refuse_a_corrupt_store_in_one_line(
    argv: tuple[str, ...], sqlite_template: Path, tmp_path: Path
) -> None:
    path = _truncated(tmp_path, sqlite_template)
    line = refusal_line(recur(f"sqlite:///{path}", *argv, cwd=tmp_path))
    assert f"{path} is corrupt" in line


@pytest.fixture
def read_only_url(sqlite_url: str) -> str:
    """The store opened read-only (what an immutable file or a read-only mount also do;
    chattr +i needs a capability a container may lack, mode=ro does not)."""
    return f"sqlite:///file:{sqlite_url.removeprefix('sqlite:///')}?mode=ro&uri=true"


def test_a_read_only_store_is_refused_by_writers_and_read_by_readers(read_only_url: str) -> None:
    """The worker started and the scheduler retried "attempt to write a readonly database"
    forever; doctor passed it. Reading it (jobs list, status) still works."""
    with pytest.raises(StoreUnusable, match="is read-only"):
        check_store_at_start(read_only_url)
    with pytest.raises(StoreUnusable, match="is read-only"):
        open_store(load_settings({"RECUR_DATABASE_URL": read_only_url}), threading.Event())
    found = {
        c.name: c for c in database_checks(load_settings({"RECUR_DATABASE_URL": read_only_url}))
    }
    assert found["sqlite writable"].level == FAIL
    store = DueStore.open(read_only_url)
    try:
        assert store.stats(NOW) is not None
    finally:
        store.close()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("?foo=bar", "unknown SQLite URL parameter(s) foo"),
        ("?timeout=1", "unknown SQLite URL parameter(s) timeout"),  # recur sets its own
        ("?mode=ro", "SQLite takes mode only in a URI"),  # was ignored: opened read-write
        ("?mode=ro&uri=true", "with uri=true the path must be a URI"),  # made "x.db?mode=ro"
    ],
)
def test_a_url_query_sqlite_would_ignore_is_refused(
    query: str, said: str, sqlite_url: str, tmp_path: Path
) -> None:
    line = refusal_line(recur(sqlite_url + query, "jobs", "list", "--user", "u1", cwd=tmp_path))
    assert said in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["due.sqlite3"]  # nothing made


def test_a_store_a_newer_recur_upgraded_is_named_not_upgraded(sqlite_url: str) -> None:
    """It said "run `recur db upgrade`", which then failed with alembic's traceback."""
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE recur_schema_version SET version_num = '0099_future'")
    with pytest.raises(StoreUnusable, match="which this code does not know"):
        DueStore.open(sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        with pytest.raises(StoreUnusable, match="0099_future"):
            upgrade(engine)
    finally:
        engine.dispose()


def test_spaces_and_unicode_in_the_path(sqlite_template: Path, tmp_path: Path) -> None:
    path = tmp_path / "with space" / "ünï cödé" / "due store.db"
    path.parent.mkdir(parents=True)
    shutil.copy(sqlite_template, path)
    store = DueStore.open(f"sqlite:///{path}")
    try:
        store.schedule([Job("k", "t", "short", "[]", NOW)], NOW)
        assert store.stats(NOW)["short"].scheduled == 1
    finally:
        store.close()


def dispatched_one(store: DueStore, key: str) -> int:
    store.schedule([Job(key, "t", "short", "[]", NOW)], NOW)
    assert store.dispatch("short", 10, NOW, NOW + timedelta(minutes=5), lambda _: None) == 1
    live = store.live_dispatch(key)
    assert live is not None
    return live[0]


def test_a_write_lock_held_by_another_process_is_waited_out(sqlite_url: str) -> None:
    """A reschedule while another connection holds the write lock waits (busy timeout)
    and then lands; nothing is lost."""
    store = DueStore.open(sqlite_url)
    try:
        token = dispatched_one(store, "locked")
        holder = sqlite3.connect(
            sqlite_url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
        )
        holder.execute("BEGIN IMMEDIATE")
        threading.Timer(1.0, lambda: holder.execute("COMMIT")).start()
        assert store.reschedule("locked", token, NOW + timedelta(hours=1), NOW) is True
        holder.close()
        assert store.live_dispatch("locked") is None  # scheduled again, at its new time
        assert store.stats(NOW)["short"].scheduled == 1
    finally:
        store.close()


def test_a_full_disk_loses_neither_the_stored_job_nor_the_rescheduled_one(sqlite_url: str) -> None:
    """SQLITE_FULL (here the file's page limit; a full tmpfs gives the same error) is an
    outage: StoreUnavailable, so the worker rides it out and hands the message back
    (tasks/base.py) instead of failing it; the row keeps its live dispatch."""
    store = DueStore.open(sqlite_url)
    try:
        token = dispatched_one(store, "full")
        store.schedule([Job("kept", "t", "medium", "[]", NOW)], NOW)

        @event.listens_for(store.engine, "connect")
        def _small(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
            dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")

        store.engine.dispose()  # new connections: at the limit
        big = '["' + "x" * 200_000 + '"]'
        with pytest.raises(StoreUnavailable, match="database or disk is full"):
            store.reschedule("full", token, NOW + timedelta(hours=1), NOW, args=big)
        with pytest.raises(StoreUnavailable, match="database or disk is full"):
            store.schedule([Job(f"n{i}", "t", "short", big, NOW) for i in range(3)], NOW)
        assert store.live_dispatch("full") == (token, NOW + timedelta(minutes=5))
        assert store.stats(NOW)["medium"].scheduled == 1
    finally:
        store.close()


def test_two_schedulers_on_one_file_dispatch_each_row_once(sqlite_url: str) -> None:
    first, second = DueStore.open(sqlite_url), DueStore.open(sqlite_url)
    try:
        first.schedule([Job(f"k{i}", "t", "short", "[]", NOW) for i in range(200)], NOW)
        sent: list[str] = []

        def drain(store: DueStore) -> None:
            def publish(rows: list[Claimed]) -> None:
                sent.extend(r.job_key for r in rows)

            while store.dispatch("short", 7, NOW, NOW + timedelta(minutes=5), publish):
                pass

        threads = [threading.Thread(target=drain, args=(s,)) for s in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(sent) == sorted(f"k{i}" for i in range(200))
    finally:
        first.close()
        second.close()
