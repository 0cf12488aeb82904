"""This checkout's hot paths against another checkout's, in one session, alternated.

A restructuring must cost nothing: the drain, the full cycle, the seed, the lock's
overhead and the metrics scrape are each run in the checkout given by
``--before-root`` (e.g. ``git worktree add /tmp/before <rev>``) and in this one,
one after the other, ``--rounds`` times (before, after, before, after, …), with the
same arguments, so both sides see the same machine. Each benchmark is the
project's own (``bench.bench_scheduler``, ``bench.bench_seed``,
``bench.bench_distlock``, ``bench.bench_metrics``), run as a subprocess with its
checkout first on ``PYTHONPATH``; its JSON is read back, and the JSON results it
overwrote in this checkout are restored afterwards. Figures: the median of each
side, and after ÷ before (for a time, before ÷ after, so > 1 is always faster),
for the raw figure and for the figure divided by its same-run baseline (drain ÷
minimal relay, cycle ÷ plain Celery, lock ÷ bare SET NX), which the machine's
load moves less.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_restructure \
        --before-root /tmp/before [--rounds 3] [--parts drain,cycle,seed,lock,metrics]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.results_io import write_result

HERE = Path(__file__).resolve().parent.parent

#: Reads a step's figures (name → value) from the JSON its benchmark wrote.
Extract = Callable[[dict[str, Any]], dict[str, float]]


def _drain(doc: dict[str, Any]) -> dict[str, float]:
    d = doc["drain"]
    return {"rows_per_s": d["recur_drain"]["per_second"],
            "vs_minimal_relay": d["recur_drain"]["per_second"] / d["minimal_relay"]["per_second"]}


def _cycle(doc: dict[str, Any]) -> dict[str, float]:
    c = doc["cycle"]
    return {"runs_per_s": c["recur_full_cycle"]["per_second"],
            "vs_plain_celery": c["recur_full_cycle"]["per_second"]
            / c["plain_celery_consume"]["per_second"]}


def _seed(doc: dict[str, Any]) -> dict[str, float]:
    return {"rows_per_s": doc["seed"]["job_rows_per_second"]}


def _lock(doc: dict[str, Any]) -> dict[str, float]:
    o = doc["overhead"]
    return {"median_us": o["recur_lock"]["median_us"],
            "vs_bare_setnx": o["recur_median_vs_bare"]}


def _metrics(doc: dict[str, Any]) -> dict[str, float]:
    s = doc["steps"][0]
    return {"scrape_p50_ms": s["scrape_in_process_ms"]["p50"],
            "heads_read_ms": s["background_heads_read_ms"]}


#: Figures where lower is better (times); the rest are rates or rate ratios.
LOWER_IS_BETTER = {"median_us", "vs_bare_setnx", "scrape_p50_ms", "heads_read_ms"}

STEPS: dict[str, tuple[list[str], str, Extract]] = {
    "drain": (["bench.bench_scheduler", "--parts", "drain", "--rows", "50000"],
              "scheduler", _drain),
    "cycle": (["bench.bench_scheduler", "--parts", "cycle", "--cycle-seconds", "15"],
              "scheduler", _cycle),
    "seed": (["bench.bench_seed", "--rows", "2000000", "--baseline-rows", "2000"],
             "seed", _seed),
    "lock": (["bench.bench_distlock", "--parts", "overhead", "--result", "restructure_lock"],
             "restructure_lock", _lock),
    "metrics": (["bench.bench_metrics", "--sizes", "1000000", "--scrapes", "200"],
                "metrics", _metrics),
}


def run_step(root: Path, step: str) -> dict[str, float]:
    """Run one benchmark in ``root`` and read its figures; restore what it overwrote."""
    argv, result, extract = STEPS[step]
    path = root / "bench" / "results" / f"{result}.json"
    kept = path.read_bytes() if path.exists() else None
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        subprocess.run([sys.executable, "-m", *argv], cwd=root, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        return extract(json.loads(path.read_text()))
    finally:
        if kept is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(kept)


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians of each side and after against before, > 1 meaning faster after."""
    out: dict[str, Any] = {}
    for name in runs["before"][0]:
        before = statistics.median(r[name] for r in runs["before"])
        after = statistics.median(r[name] for r in runs["after"])
        gain = before / after if name in LOWER_IS_BETTER else after / before
        out[name] = {"before": round(before, 3), "after": round(after, 3),
                     "after_vs_before": round(gain, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-root", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default=",".join(STEPS))
    parser.add_argument("--result", default="restructure",
                        help="name of the JSON written under bench/results/")
    opts = parser.parse_args()
    parts = [p for p in opts.parts.split(",") if p]
    unknown = [p for p in parts if p not in STEPS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    sides = {"before": opts.before_root.resolve(), "after": HERE}
    figures: dict[str, Any] = {}
    loads: list[float] = []
    for step in parts:
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for i in range(opts.rounds):
            for side, root in sides.items():
                loads.append(os.getloadavg()[0])
                runs[side].append(run_step(root, step))
                print(f"{step} round {i + 1} {side}: {runs[side][-1]}", flush=True)
        figures[step] = {"runs": runs, "median": summary(runs)}
    write_result(opts.result, {
        "command": "python -m bench.bench_restructure --before-root <checkout> "
                   f"--rounds {opts.rounds} --parts {','.join(parts)} --result {opts.result}",
        "before_root": str(sides["before"]),
        "load_avg_1m_at_each_run": {"min": min(loads), "median": statistics.median(loads),
                                    "max": max(loads)},
        "goal": "each figure within 5 % of before or better (after_vs_before >= 0.95)",
        **figures,
    })


if __name__ == "__main__":
    main()
