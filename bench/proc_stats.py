"""CPU time and memory of processes, read from /proc (Linux), for the benchmarks."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may hold spaces: split after its closing parenthesis
    head, _, rest = text.rpartition(")")
    return [head.split("(", 1)[1], *rest.split()]


def processes() -> dict[int, tuple[str, int]]:
    """pid -> (comm, parent pid) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = (stat[0], int(stat[2]))
    return out


def tree(root: int) -> list[int]:
    """``root`` and every descendant."""
    procs, found = processes(), [root]
    for pid in found:
        found.extend(p for p, (_, parent) in procs.items() if parent == pid)
    return found


def named(*comms: str) -> list[int]:
    """Every process whose command name is one of ``comms``."""
    return [pid for pid, (comm, _) in processes().items() if comm in comms]


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` (those still alive)."""
    total = 0
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            total += int(stat[12]) + int(stat[13])  # utime, stime
    return total / TICK


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident memory of ``pids`` together."""
    total = 0
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            total += int(stat[22]) * PAGE
    return total


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / TICK, sum(fields) / TICK


def cpu_snapshot(pids: Iterable[int]) -> dict[int, float]:
    """pid -> user + system CPU seconds of the process and of its reaped children
    (utime, stime, cutime, cstime): a child that exits mid-window stays counted."""
    out = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            out[pid] = sum(int(x) for x in stat[12:16]) / TICK
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two snapshots (a process new in ``after`` counts whole)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
