"""A process's memory as Linux counts it (/proc/PID/smaps_rollup), for the memory benchmark.

RSS counts every resident page the process maps, shared or not, so the RSS of a
prefork parent and its children added up counts the pages they share (copy-on-
write after the fork) once per process. PSS divides each shared page among the
processes that map it (the PSS of a group adds up to what the group really
holds); USS (Private_Clean + Private_Dirty) is what the process alone holds:
what killing it would free.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

FIELDS = {"Rss": "rss", "Pss": "pss", "Private_Clean": "uss", "Private_Dirty": "uss",
          "Shared_Clean": "shared", "Shared_Dirty": "shared"}


def memory(pid: int) -> dict[str, float] | None:
    """MB of rss, pss, uss and shared of ``pid`` (None when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = dict.fromkeys(("rss", "pss", "uss", "shared"), 0.0)
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            out[FIELDS[name]] += int(rest.split()[0]) / 1024
    return {k: round(v, 1) for k, v in out.items()}


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (a prefork worker's pool processes)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return sorted(set(found))


def group(pid: int) -> dict[str, object]:
    """The parent's memory, each child's, and the group's totals (rss summed, as tools
    that add RSS up do, and pss / uss summed: what the group holds)."""
    parent = memory(pid)
    kids = [m for m in (memory(c) for c in children(pid)) if m is not None]
    everyone = ([parent] if parent else []) + kids
    return {"parent": parent, "children": kids,
            "total": {k: round(sum(m[k] for m in everyone), 1) for k in ("rss", "pss", "uss")}}


def peak(samples: Iterable[dict[str, object]]) -> dict[str, object]:
    """The largest figure of each kind over ``samples`` of :func:`group`: the parent's,
    the largest child's, and the group total's."""
    top: dict[str, dict[str, float]] = {"parent": {}, "child_max": {}, "total": {}}
    for sample in samples:
        rows: list[tuple[str, dict[str, float]]] = []
        if isinstance(sample["parent"], dict):
            rows.append(("parent", sample["parent"]))
        rows.extend(("child_max", c) for c in sample["children"])  # type: ignore[attr-defined]
        rows.append(("total", sample["total"]))  # type: ignore[arg-type]
        for role, figures in rows:
            for key in ("rss", "pss", "uss"):
                top[role][key] = max(top[role].get(key, 0.0), figures[key])
    return dict(top)
