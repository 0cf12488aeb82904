"""Benchmarks a busy machine cannot fool: wait for a quiet machine before the run, watch
it during the run, and say whether the figures may be written.

A benchmark's process begins a session when it imports bench/results_io.py (as the
main program: ``python -m bench.bench_x``); ``write_result`` then asks :func:`verdict`.
Busy means other processes (not the benchmark's process tree, not the services it
drives) used more than ``RECURBENCH_BUSY_CORES`` (0.25) cores on average before or
during the run; before the run the services count as other load too. ``--allow-busy``
(or ``RECURBENCH_ALLOW_BUSY=1``) starts without waiting and writes anyway, marked busy.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu_share import MARK, Classifier, Watch, Window, measure

BENCH_DIR = Path(__file__).resolve().parent
ALLOW_FLAG = "--allow-busy"
ALLOW_ENV = "RECURBENCH_ALLOW_BUSY"
THRESHOLD_ENV = "RECURBENCH_BUSY_CORES"
WAIT_ENV = "RECURBENCH_QUIET_WAIT"
DEFAULT_THRESHOLD, DEFAULT_WAIT = 0.25, 120.0
#: Seconds of one look at the machine while waiting for it to be quiet.
LOOK = 3.0


def say(line: str) -> None:
    print(f"recur bench: {line}", file=sys.stderr, flush=True)


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        say(f"{name} must be a number >= 0, got {raw!r}")
        raise SystemExit(2)
    return value


def _top(window: Window) -> str:
    names = [f"{comm} {cores:.2f}" for comm, cores in window.top_other.items() if cores >= 0.01]
    return f" ({', '.join(names[:3])})" if names else ""


def others_before(window: Window) -> float:
    """Before the run the services are someone else's load too."""
    return window.cores["other"] + window.cores["services"]


@dataclass
class Session:
    """One benchmark run: how long it waited, the machine before, the watch during."""

    classifier: Classifier
    threshold: float
    allow_busy: bool
    waited: float
    before: Window
    watch: Watch

    def verdict(self) -> tuple[dict[str, Any], str | None]:
        """The ``machine`` block of the result, and why it is busy (None: quiet)."""
        during = self.watch.so_far()
        before_cores, during_cores = others_before(self.before), during.cores["other"]
        why = []
        if before_cores > self.threshold:
            why.append(f"other processes used {before_cores:.2f} cores before the run"
                       f"{_top(self.before)}")
        if during_cores > self.threshold:
            why.append(f"other processes used {during_cores:.2f} cores during the run"
                       f"{_top(during)}")
        block = {"cores": os.cpu_count(), "busy_threshold_cores": self.threshold,
                 "waited_for_quiet_s": round(self.waited, 1),
                 "load_1m_before": self.before.load_max, "load_1m_during_max": during.load_max,
                 "other_cores_before": round(before_cores, 3),
                 "other_cores_during": round(during_cores, 3),
                 "services_cores_during": round(during.cores["services"], 3),
                 "own_cores_during": round(during.cores["own"], 3),
                 "before": self.before.as_dict(), "during": during.as_dict()}
        return block, "; ".join(why) or None


_session: Session | None = None


def current() -> Session | None:
    return _session


def wait_quiet(classifier: Classifier, threshold: float, patience: float,
               allow_busy: bool) -> tuple[Window, float]:
    """Look at the machine until other processes use at most ``threshold`` cores; after
    ``patience`` seconds exit 2 saying why (with ``allow_busy``: one look, then go)."""
    started, said = time.monotonic(), 0.0
    while True:
        look = measure(classifier, LOOK)
        waited, busy = time.monotonic() - started, others_before(look)
        if busy <= threshold or allow_busy:
            return look, waited
        if waited >= patience:
            say(f"not started: other processes used {busy:.2f} cores{_top(look)} for "
                f"{waited:.0f}s (at most {threshold} wanted; {THRESHOLD_ENV}, {WAIT_ENV}; "
                f"{ALLOW_FLAG} runs anyway and marks the result busy)")
            raise SystemExit(2)
        if waited - said >= 15 or not said:
            say(f"waiting for a quiet machine: other processes use {busy:.2f} cores"
                f"{_top(look)}; up to {patience - waited:.0f}s more")
            said = waited or 1e-9


def begin(argv: list[str] | None = None) -> Session:
    """Start this process's session: take ``--allow-busy`` out of ``argv`` (sys.argv by
    default, before the benchmark parses it), mark the environment its children
    inherit, wait for a quiet machine, then watch it."""
    global _session
    args = sys.argv if argv is None else argv
    allow = ALLOW_FLAG in args or os.environ.get(ALLOW_ENV, "") == "1"
    while ALLOW_FLAG in args:
        args.remove(ALLOW_FLAG)
    threshold, patience = _number(THRESHOLD_ENV, DEFAULT_THRESHOLD), _number(WAIT_ENV,
                                                                           DEFAULT_WAIT)
    token = os.environ.setdefault(MARK, uuid.uuid4().hex)
    classifier = Classifier(os.getpid(), token)
    before, waited = wait_quiet(classifier, threshold, patience, allow)
    _session = Session(classifier, threshold, allow, waited, before,
                       Watch(classifier).start())
    return _session


def begin_for_main() -> Session | None:
    """Begin a session when the main program is a benchmark (bench/bench_*.py) that is not
    itself a child of another benchmark's run, and is not asked for its --help."""
    if _session is not None or MARK in os.environ:
        return _session
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or Path(path).resolve().parent != BENCH_DIR \
            or not Path(path).name.startswith("bench_"):
        return None
    if {"-h", "--help"} & set(sys.argv[1:]):
        return None
    return begin()
