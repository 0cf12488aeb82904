"""CPU and memory of the seed benchmark's processes, read from /proc: the JVM, the
Python processes and PostgreSQL (bench/bench_seed.py and bench/seed_ceiling.py).

PostgreSQL's CPU is counted exactly, not sampled: every live ``postgres`` process's
time plus the postmaster's reaped children's (``cutime``/``cstime``), so a backend,
a parallel index-build worker or an autovacuum worker that ends between two looks
is still counted whole. (Other clients' backends count too: the quiet-machine
watch says whether there were any.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    name: str
    parent: int
    rss: int
    cpu_seconds: float
    started: int
    #: CPU seconds of its children that ended and were waited for.
    reaped_seconds: float = 0.0


def processes() -> dict[int, Proc]:
    """Every process's name, parent, RSS, CPU seconds used and start tick, from /proc."""
    table: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        table[int(entry.name)] = Proc(name, int(fields[1]), int(fields[21]) * PAGE,
                                      (int(fields[11]) + int(fields[12])) / TICKS,
                                      int(fields[19]),
                                      (int(fields[13]) + int(fields[14])) / TICKS)
    return table


def tree(table: dict[int, Proc], root: int) -> set[int]:
    members, changed = {root}, True
    while changed:
        new = {pid for pid, proc in table.items() if proc.parent in members} - members
        members |= new
        changed = bool(new)
    return members & table.keys()


def tree_rss(table: dict[int, Proc], root: int) -> tuple[int, int]:
    """(RSS of the whole process tree under ``root``, RSS of its biggest java process)."""
    members = tree(table, root)
    java = max((table[p].rss for p in members if table[p].name == "java"), default=0)
    return sum(table[p].rss for p in members), java


def postgres_seconds(table: dict[int, Proc] | None = None) -> float:
    """CPU seconds PostgreSQL has used so far: its live processes and those it reaped.

    A difference of two readings is exact whatever started or ended between them.
    """
    table = processes() if table is None else table
    server = {pid for pid, p in table.items() if p.name.startswith("postgres")}
    postmasters = {pid for pid in server if table[pid].parent not in server}
    return (sum(table[pid].cpu_seconds for pid in server)
            + sum(table[pid].reaped_seconds for pid in postmasters))


class CpuMeter:
    """CPU seconds used while the seed runs, by side: the JVM, the Python processes
    (driver and Spark's workers) and PostgreSQL (every postgres process: backends,
    WAL writer, checkpointer, index-build workers; exact, see :func:`postgres_seconds`).
    The JVM and Python sides are sampled, so a process that lives less than one
    sample is missed (Spark's Python workers live for the whole job)."""

    def __init__(self) -> None:
        table = processes()
        self.first = {(pid, p.started): p.cpu_seconds for pid, p in table.items()}
        self.last: dict[tuple[int, int], tuple[str, float]] = {}
        self.postgres_first = postgres_seconds(table)
        self.postgres_last = self.postgres_first

    def sample(self, table: dict[int, Proc], root: int) -> None:
        members = tree(table, root)
        for pid, proc in table.items():
            side = ("jvm" if pid in members and proc.name == "java" else
                    "python" if pid in members and not proc.name.startswith("postgres")
                    else None)
            if side is not None:
                self.last[(pid, proc.started)] = (side, proc.cpu_seconds)
        self.postgres_last = postgres_seconds(table)

    def seconds(self) -> dict[str, float]:
        """CPU seconds by side up to the last sample (take one after the run ends)."""
        used: dict[str, float] = {"postgresql": self.postgres_last - self.postgres_first}
        for key, (side, cpu) in self.last.items():
            used[side] = used.get(side, 0.0) + cpu - self.first.get(key, 0.0)
        return {side: round(cpu, 2) for side, cpu in sorted(used.items())}
