"""The seed's index plan: load an empty store without its secondary indexes, then build them.

Keeping six indexes up to date row by row costs the seed about half its speed, and
leaves them loosely packed; building them once after the load is a sort each,
and packs them. So a seed into an EMPTY PostgreSQL store drops every index of
``due_jobs`` but the primary key (which keeps the load idempotent) before
loading (:func:`defer_indexes`) and builds them after (:func:`build_indexes`,
also run when the load fails). A store that already holds rows keeps its
indexes: the scheduler may be reading them.

The build is CPU-bound in PostgreSQL (12 to 15 µs a row, docs/seed.md), so it runs
on one connection per core at once (CREATE INDEX takes a SHARE lock, which does
not block another), biggest index first, each with parallel workers for the
cores the others leave. Each index commits on its own; a failed one stops those
not yet started and is raised, naming the indexes still missing; an interrupt
cancels the builds under way (each rolls back whole).

A seed killed between the two leaves the store without those indexes. It is
not left so for good: every process that opens the store refuses to start
(:func:`scheduler.store.schema_check.check_schema`, and so ``recur doctor``)
naming ``recur db upgrade``, which builds whatever index is missing
(:func:`scheduler.store.migrate.upgrade`).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url

from scheduler.store.connection import (
    is_driver_error,
    is_sqlite,
    make_engine,
    translate,
    translated,
)
from scheduler.store.schema import secondary_indexes

#: Sort memory of each build session: 10M rows' keys sort in memory instead of in runs.
BUILD_MEMORY = "SET maintenance_work_mem = '512MB'"
#: PostgreSQL µs per row of each big index (docs/seed.md), to build the biggest first so
#: the connections finish together; the partial ones over no rows cost next to nothing.
BUILD_COST = {"ix_due_jobs_user": 6.0, "ix_due_jobs_early": 5.0, "ix_due_jobs_scheduled": 4.0}
_PRESENT = text("SELECT indexname FROM pg_indexes WHERE tablename = 'due_jobs' "
                "AND schemaname = current_schema()")


def missing_indexes(conn: Connection) -> list[str]:
    """The secondary indexes of due_jobs the store lacks (PostgreSQL)."""
    present = set(conn.execute(_PRESENT).scalars())
    return [name for name in secondary_indexes() if name not in present]


def _begin(url: str) -> Any:
    return translated(f"due-jobs database {make_url(url)!r}")


def defer_indexes(url: str) -> list[str]:
    """Drop the secondary indexes if due_jobs is empty; the names dropped.

    One transaction: the table is locked against writes, found empty, and the
    indexes go; a writer that comes in between waits and then writes an empty
    store's row without them (the build after the load indexes it).
    """
    if is_sqlite(url):
        return []
    engine = make_engine(url)
    try:
        with _begin(url), engine.begin() as conn:
            conn.execute(text("LOCK TABLE due_jobs IN SHARE ROW EXCLUSIVE MODE"))
            if conn.execute(text("SELECT EXISTS (SELECT 1 FROM due_jobs)")).scalar():
                return []
            present = set(conn.execute(_PRESENT).scalars())
            dropped = [name for name in secondary_indexes() if name in present]
            for name in dropped:
                conn.execute(text(f"DROP INDEX {name}"))
            return dropped
    finally:
        engine.dispose()


class _Builds:
    """The indexes left to build, shared by the build connections; the first failure."""

    def __init__(self, engine: Engine, names: list[str], workers: int) -> None:
        self.engine, self.todo = engine, sorted(names, key=lambda n: -BUILD_COST.get(n, 0.0))
        self.settings = (BUILD_MEMORY, f"SET max_parallel_maintenance_workers = {workers}")
        self.lock = threading.Lock()
        self.failed: tuple[str | None, BaseException] | None = None
        self.running: dict[str, Any] = {}  # index name -> its driver connection
        self.built: list[str] = []

    def next(self, raw: Any) -> str | None:
        with self.lock:
            if self.failed is not None or not self.todo:
                return None
            name = self.todo.pop(0)
            self.running[name] = raw
            return name

    def work(self) -> None:
        """One build connection: take the biggest index left until none is or one failed."""
        name: str | None = None
        try:
            with self.engine.connect() as conn:
                for setting in self.settings:
                    conn.execute(text(setting))
                while (name := self.next(conn.connection.dbapi_connection)) is not None:
                    conn.execute(text(secondary_indexes()[name]))
                    conn.commit()
                    with self.lock:
                        del self.running[name]
                        self.built.append(name)
        except BaseException as exc:  # handed to the caller's thread
            with self.lock:
                self.running.pop(name or "", None)
                if self.failed is None:
                    self.failed = (name, exc)

    def cancel(self) -> None:
        """Stop the builds under way (each rolls back whole) and any not yet started."""
        with self.lock:
            self.todo.clear()
            for raw in self.running.values():
                raw.cancel_safe()


def build_missing(engine: Engine, connections: int | None = None) -> list[str]:
    """Build every missing secondary index of due_jobs, then analyze; the names built.

    On ``connections`` at once (default: one per core, at most one per index), each
    build with ``cores // connections`` parallel workers (at least 1): the last build
    left still has the cores the others freed.
    """
    if engine.dialect.name != "postgresql":
        return []
    down = f"due-jobs database {engine.url!r}"
    with translated(down), engine.connect() as conn:
        missing = missing_indexes(conn)
    if not missing:
        return []
    cores = os.cpu_count() or 1
    width = max(1, min(connections or cores, len(missing)))
    builds = _Builds(engine, missing, max(1, cores // width))
    threads = [threading.Thread(target=builds.work, name=f"index-build-{i}", daemon=True)
               for i in range(width)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # interrupted: nothing goes on building behind the caller
        builds.cancel()
        for thread in threads:
            thread.join()
        raise
    if builds.failed is not None:
        name, exc = builds.failed
        unbuilt = ", ".join(n for n in secondary_indexes() if n in missing
                            and n not in builds.built)
        what = f"building index {name}" if name else "opening a build connection"
        failed = f"{down}: {what} failed (still missing: {unbuilt})"
        if is_driver_error(exc):  # ours, its first line (no DETAIL, no SQL); an outage
            kind = type(translate(exc, down, failed))  # (a timeout too) names them as well
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise kind(f"{failed}: {first}") from exc
        raise exc
    with translated(down), engine.connect() as conn:
        conn.execute(text("ANALYZE due_jobs"))
        conn.commit()
    return builds.built


def build_indexes(url: str) -> list[str]:
    """:func:`build_missing` on the store at ``url``."""
    engine = make_engine(url)
    try:
        return build_missing(engine)
    finally:
        engine.dispose()
