"""Autovacuum at its defaults, for a server whose autovacuum is off.

This machine's PostgreSQL runs with ``autovacuum = off``
(``/etc/postgresql/15/main/conf.d/90-ci.conf``), and a per-table setting
cannot switch it on. So a benchmark that wants to see vacuum under load runs
this thread: every few seconds it does what the autovacuum launcher would,
for the tables given (each partition of a partitioned table on its own):
once a table's dead tuples pass ``50 + scale x its tuples`` (autovacuum's
threshold, scale 0.2 by default), it runs ``VACUUM`` on it with autovacuum's
cost-based throttling (``vacuum_cost_delay`` 2 ms, ``vacuum_cost_limit``
200), one table at a time (as one worker). Each run is recorded: the table,
when it started, its dead tuples then, and how long it took.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from bench.private_env import PG_DSN, pg

#: Seconds between two looks at the tables' dead tuples (the launcher's naptime is 60 s
#: per database; a shorter look only makes the emulation start sooner, never vacuum more).
LOOK_SECONDS = 5.0


def autovacuum_is_on() -> bool:
    return str(pg("SHOW autovacuum")[0][0]) == "on"


def leaves(table: str) -> list[str]:
    """The table itself, or the partitions of a partitioned table."""
    rows = pg(f"SELECT relid::regclass::text FROM pg_partition_tree('{table}') WHERE isleaf")
    return [str(name) for (name,) in rows] or [table]


class Autovacuum(threading.Thread):
    """Vacuums ``table``'s leaves past autovacuum's threshold, while running."""

    def __init__(self, table: str, scale: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.tables, self.scale = leaves(table), scale
        self.stopping = threading.Event()
        self.runs: list[dict[str, Any]] = []
        self.running: str | None = None
        self.t0 = time.monotonic()

    def run(self) -> None:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute("SET vacuum_cost_delay = '2ms'")
            conn.execute("SET vacuum_cost_limit = 200")
            while not self.stopping.wait(LOOK_SECONDS):
                for table, dead, tuples in self.due(conn):
                    if self.stopping.is_set():
                        break
                    self.vacuum(conn, table, dead, tuples)

    def due(self, conn: psycopg.Connection[Any]) -> list[tuple[str, int, float]]:
        """(table, dead tuples, tuples) of the leaves past the threshold, most dead first."""
        rows = conn.execute(
            "SELECT s.relid::regclass::text, s.n_dead_tup, c.reltuples FROM "
            "pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.relid = ANY(%s::regclass[]) AND s.n_dead_tup > 50 + %s * "
            "greatest(c.reltuples, 0) ORDER BY s.n_dead_tup DESC",
            (self.tables, self.scale)).fetchall()
        return [(str(t), int(d), float(n)) for t, d, n in rows]

    def vacuum(self, conn: psycopg.Connection[Any], table: str, dead: int,
               tuples: float) -> None:
        started = time.monotonic()
        self.running = table
        conn.execute(f"VACUUM {table}")
        self.running = None
        self.runs.append({"table": table.rsplit(".", 1)[-1],
                          "at_s": round(started - self.t0),
                          "dead_tuples_before": dead, "tuples": round(tuples),
                          "seconds": round(time.monotonic() - started, 1)})
        time.sleep(2.0)  # the statistics views catch up before the next look

    def stop(self) -> list[dict[str, Any]]:
        """Stop after the vacuum in hand; the runs made."""
        self.stopping.set()
        self.join()
        return self.runs
