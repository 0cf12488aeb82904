"""Shared by the benchmarks: print figures and write them as JSON under bench/results/,
only when the machine was quiet (bench/quiet.py).

Importing this module from a benchmark run as the main program (``python -m
bench.bench_x``) waits for a quiet machine and starts watching it, so a benchmark
needs nothing else than ``write_result``; import it at the top of the benchmark so the
watch covers the whole run. ``--allow-busy`` (taken out of sys.argv here) writes a busy
run's figures anyway, marked ``"busy": true``; without it a busy run's figures are
printed, not written, and the process exits with code 2.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import quiet

#: Where results go; ``RECURBENCH_RESULTS`` moves them (the tests write elsewhere).
RESULTS = Path(os.environ.get("RECURBENCH_RESULTS")
               or Path(__file__).resolve().parent / "results")

quiet.begin_for_main()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_1m": os.getloadavg()[0]}


def median_of(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric figure, the median over the repeats (other figures: the first's)."""
    out: dict[str, Any] = {}
    for key, value in repeats[0].items():
        values = [r.get(key) for r in repeats]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)  # type: ignore[type-var]
        else:
            out[key] = value
    return out


def write_result(name: str, figures: dict[str, Any],
                 repeats: Sequence[dict[str, Any]] | None = None, *,
                 partial: bool = False) -> Path:
    """Print ``figures`` and write them to ``bench/results/<name>.json`` with the
    ``machine`` block; with ``repeats`` (one dict of figures per repeat) every repeat is
    kept and ``median`` holds their medians. A busy machine: exit 2, nothing written
    (``partial``, a checkpoint of a long run: not written, the run goes on)."""
    session = quiet.current()
    block, busy = session.verdict() if session is not None else ({"watched": False}, None)
    doc = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {**machine(), **block}, "busy": busy is not None, **figures}
    if busy is not None:
        doc["busy_why"] = busy
    if repeats:
        doc["median"] = median_of(repeats)
        doc["repeats"] = list(repeats)
    print(json.dumps(doc, indent=2, default=str))
    path = RESULTS / f"{name}.json"
    if busy is not None and not (session is not None and session.allow_busy):
        quiet.say(f"not written: {busy} (at most {session.threshold if session else 0} "
                  f"cores wanted; {quiet.ALLOW_FLAG} writes it marked busy)")
        sys.stdout.flush()
        if partial:
            return path
        raise SystemExit(2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"written to {path}")
    return path
