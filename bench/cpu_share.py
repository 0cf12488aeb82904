"""Who used the machine's CPU, read from /proc: the benchmark, the services it drives,
the kernel, or other processes (someone else's tests, a build) that would skew its figures.

A process belongs to the benchmark when its ancestry reaches the benchmark's root
process or when its environment carries the run's mark (``RECURBENCH_RUN``, inherited
by every child, kept by a daemon that left the tree, e.g. a private PostgreSQL that
``pg_ctl`` started). PostgreSQL, RabbitMQ and Redis processes are "services": busy
*because* of the benchmark while it runs, so counted apart (before the run they count
as other load). CPU of a process that exited between two samples is found in its
parent's reaped-children counters (cutime + cstime) and credited to the parent's side.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
#: The environment variable every process of one benchmark run carries.
MARK = "RECURBENCH_RUN"  # not RECUR_: the settings refuse RECUR_ names they do not know
#: Command names of the services a benchmark drives (comm is cut at 15 characters).
SERVICE_COMMS = frozenset({"postgres", "beam.smp", "erl_child_setup", "inet_gethost", "epmd",
                           "redis-server"})
SIDES = ("own", "services", "kernel", "other")


@dataclass(frozen=True)
class Proc:
    """One process at one sample: identity, parent, CPU ticks of itself and of its
    reaped children."""

    pid: int
    start: int
    comm: str
    ppid: int
    own_ticks: int
    child_ticks: int


def read_proc(pid: int) -> Proc | None:
    """The process ``pid`` now (None when it is gone or unreadable)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    f = rest.split()  # f[0] is field 3 (state): field n is f[n - 3]
    return Proc(pid, int(f[19]), head.split("(", 1)[1], int(f[1]),
                int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))


def read_all() -> dict[int, Proc]:
    """Every process of the machine now."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (proc := read_proc(int(entry.name))) is not None:
            out[proc.pid] = proc
    return out


def machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of all cores since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def load_1m() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def has_mark(pid: int, token: str) -> bool:
    """Whether ``pid``'s environment carries this run's mark."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARK}={token}".encode() in env.split(b"\0")


@dataclass
class Classifier:
    """Sorts processes into SIDES for one benchmark run (cached per process)."""

    root: int
    token: str
    _known: dict[tuple[int, int], str] = field(default_factory=dict)

    def side(self, proc: Proc, procs: dict[int, Proc]) -> str:
        key = (proc.pid, proc.start)
        if key not in self._known:
            self._known[key] = self._side(proc, procs)
        return self._known[key]

    def _side(self, proc: Proc, procs: dict[int, Proc]) -> str:
        if proc.comm in SERVICE_COMMS:
            return "services"
        if proc.pid == 2 or proc.ppid == 2:
            return "kernel"
        pid, seen = proc.pid, 0
        while pid > 1 and seen < 64:  # the ancestry, up to init
            if pid == self.root:
                return "own"
            parent = procs.get(pid)
            pid, seen = (parent.ppid if parent else 0), seen + 1
        return "own" if has_mark(proc.pid, self.token) else "other"


@dataclass(frozen=True)
class Snapshot:
    """The whole machine at one instant."""

    at: float
    busy: int
    total: int
    load: float
    procs: dict[int, Proc]


def snapshot(at: float) -> Snapshot:
    busy, total = machine_ticks()
    return Snapshot(at, busy, total, load_1m(), read_all())


@dataclass
class Interval:
    """CPU seconds by side (and the busiest other processes) between two snapshots."""

    seconds: float
    machine_busy: float
    by_side: dict[str, float]
    by_other: dict[str, float]


def _gone_by_parent(a: Snapshot, b: Snapshot) -> dict[int, int]:
    """Per parent, the ticks already seen (at ``a``) of its children that are gone at ``b``,
    each with its own gone descendants': what its reaped-children ticks will repeat."""
    gone = {pid: p for pid, p in a.procs.items()
            if (now := b.procs.get(pid)) is None or now.start != p.start}
    kids: dict[int, list[int]] = defaultdict(list)
    for pid, p in gone.items():
        kids[p.ppid].append(pid)

    def seen(pid: int, depth: int = 0) -> int:
        p = gone[pid]
        return p.own_ticks + p.child_ticks + (
            sum(seen(k, depth + 1) for k in kids.get(pid, ())) if depth < 32 else 0)

    out: dict[int, int] = defaultdict(int)
    for pid, p in gone.items():
        out[p.ppid] += seen(pid)
    return out


def between(a: Snapshot, b: Snapshot, classifier: Classifier) -> Interval:
    """What each side used from ``a`` to ``b``: each live process's own ticks, plus what
    its children that exited meanwhile used since ``a`` (from its reaped-children ticks)."""
    ticks: dict[str, int] = defaultdict(int)
    other: dict[str, int] = defaultdict(int)
    gone_by_parent = _gone_by_parent(a, b)
    for pid, new in b.procs.items():
        old = a.procs.get(pid)
        base_own, base_child = ((old.own_ticks, old.child_ticks)
                                if old is not None and old.start == new.start else (0, 0))
        used = new.own_ticks - base_own  # plus its reaped children's, less what ``a`` saw
        used += max(0, new.child_ticks - base_child - gone_by_parent.get(pid, 0))
        if used <= 0:
            continue
        side = classifier.side(new, b.procs)
        ticks[side] += used
        if side == "other":
            other[new.comm] += used
    return Interval(b.at - a.at, (b.busy - a.busy) / TICK,
                    {s: ticks.get(s, 0) / TICK for s in SIDES},
                    {c: t / TICK for c, t in other.items()})


@dataclass(frozen=True)
class Window:
    """Mean cores by side over a stretch of time, with the load average and the peaks."""

    seconds: float
    machine_busy_cores: float
    cores: dict[str, float]
    load_first: float
    load_max: float
    other_peak_cores: float
    top_other: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 1),
                "machine_busy_cores": round(self.machine_busy_cores, 3),
                **{f"{side}_cores": round(c, 3) for side, c in self.cores.items()},
                # exited processes no parent reaped, interrupts: in no side's figure
                "unattributed_cores": round(self.machine_busy_cores - sum(self.cores.values()),
                                            3),
                "load_1m_first": self.load_first, "load_1m_max": self.load_max,
                "other_peak_cores": round(self.other_peak_cores, 3),
                "top_other": {c: round(v, 3) for c, v in self.top_other.items()}}


def window(intervals: list[Interval], loads: list[float]) -> Window:
    """The totals of consecutive intervals as mean cores."""
    seconds = sum(iv.seconds for iv in intervals) or 1e-9
    sides = {s: sum(iv.by_side[s] for iv in intervals) / seconds for s in SIDES}
    comms: dict[str, float] = defaultdict(float)
    for iv in intervals:
        for comm, used in iv.by_other.items():
            comms[comm] += used / seconds
    top = dict(sorted(comms.items(), key=lambda kv: -kv[1])[:5])
    peak = max((iv.by_side["other"] / iv.seconds for iv in intervals if iv.seconds > 0),
               default=0.0)
    return Window(seconds, sum(iv.machine_busy for iv in intervals) / seconds, sides,
                  loads[0] if loads else load_1m(), max(loads, default=load_1m()), peak, top)


class Watch:
    """Samples the machine every ``period`` seconds in a daemon thread, so a run's figures
    by side cover all of it (one sample reads every /proc/<pid>/stat: a few ms)."""

    def __init__(self, classifier: Classifier, period: float = 1.0) -> None:
        self.classifier, self.period = classifier, period
        self.intervals: list[Interval] = []
        self.loads: list[float] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._last = snapshot(time.monotonic())
        self.loads.append(self._last.load)
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopping.wait(self.period):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            now = snapshot(time.monotonic())
            self.intervals.append(between(self._last, now, self.classifier))
            self.loads.append(now.load)
            self._last = now

    def so_far(self) -> Window:
        """Everything since the watch began, up to now."""
        self.sample()
        with self._lock:
            return window(list(self.intervals), list(self.loads))

    def stop(self) -> Window:
        self._stopping.set()
        return self.so_far()


def measure(classifier: Classifier, seconds: float) -> Window:
    """The machine over the next ``seconds`` (sampled once a second)."""
    watch = Watch(classifier)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        watch.sample()
    return window(watch.intervals, watch.loads)
