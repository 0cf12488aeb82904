"""The full cycle with tracing off and on, and against a checkout without tracing.

Each side runs the project's cycle benchmark (``bench.bench_scheduler --parts
cycle``: a no-op recurring task going round dispatch → worker (threads, 8) →
reschedule, and plain Celery consuming the same no-op task as its same-run
baseline) as a subprocess, the sides alternated ``--rounds`` times so they see
the same machine:

* ``today`` (with ``--before-root``, e.g. ``git archive HEAD | tar -x -C /tmp/t``):
  the checkout before tracing existed;
* ``off``: this checkout as installed, tracing not configured (the default);
* ``on``: RECUR_OTEL=1, every span through the SDK's BatchSpanProcessor to an
  exporter that only counts them (bench/tracing_sink.py), Celery instrumented;
* ``on_lean`` (with ``--lean``): the same as ``on`` with RECUR_OTEL_CELERY=lean (recur's
  own run span instead of opentelemetry-instrumentation-celery's, routing/tracing/lean.py);
* ``on_sampled`` (with ``--sample RATIO``): the same, sampled at RATIO
  (``parentbased_traceidratio``: a claim's decision holds for the runs it dispatched).

Figures: each side's median runs/s and runs/s ÷ plain Celery's, off ÷ today and
on ÷ off (goals: ≥ 0.99 and ≥ 0.8), and the spans the ``on`` side exported.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_tracing \
        [--before-root /tmp/today] [--rounds 3] [--cycle-seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.results_io import write_result

HERE = Path(__file__).resolve().parent.parent


def side_env(root: Path, side: str, spans: Path, sample: float) -> dict[str, str]:
    """The environment of one side: no tracing variable at all but the ``on`` sides'."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECUR_OTEL", "OTEL_"))}
    env["PYTHONPATH"] = str(root)
    if side.startswith("on"):
        env.update(RECUR_OTEL="1", RECUR_OTEL_SETUP="bench.tracing_sink:install",
                   OTEL_TRACES_EXPORTER="none", TRACING_BENCH_SPANS=str(spans))
    if side == "on_lean":
        env["RECUR_OTEL_CELERY"] = "lean"
    if side == "on_sampled":
        env.update(OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                   OTEL_TRACES_SAMPLER_ARG=str(sample))
    return env


def run_side(root: Path, side: str, seconds: int, sample: float = 1.0) -> dict[str, float]:
    """One cycle run of ``side`` in ``root``: its figures (the JSON it overwrote is put back)."""
    path = root / "bench" / "results" / "scheduler.json"
    kept = path.read_bytes() if path.exists() else None
    spans = Path(tempfile.mkdtemp(prefix="recur-bench-spans-"))
    try:
        subprocess.run([sys.executable, "-m", "bench.bench_scheduler", "--parts", "cycle",
                        "--cycle-seconds", str(seconds)], cwd=root, check=True,
                       env=side_env(root, side, spans, sample), stdout=subprocess.DEVNULL)
        cycle = json.loads(path.read_text())["cycle"]
    finally:
        if kept is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(kept)
    ours, plain = cycle["recur_full_cycle"], cycle["plain_celery_consume"]
    return {"runs_per_s": ours["per_second"],
            "vs_plain_celery": round(ours["per_second"] / max(plain["per_second"], 1), 3),
            "plain_runs_per_s": plain["per_second"],
            "spans_exported": sum(int(f.read_text() or 0) for f in spans.iterdir())}


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(r[name] for r in runs) for name in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-root", type=Path, default=None,
                        help="a checkout without tracing (today's), run as the 'today' side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycle-seconds", type=int, default=15)
    parser.add_argument("--sample", type=float, default=None,
                        help="also run tracing on, sampled at this ratio (e.g. 0.01)")
    parser.add_argument("--lean", action="store_true",
                        help="also run tracing on with RECUR_OTEL_CELERY=lean")
    parser.add_argument("--result", default="tracing")
    opts = parser.parse_args()
    sides = {"off": HERE, "on": HERE}
    if opts.lean:
        sides["on_lean"] = HERE
    if opts.sample is not None:
        sides["on_sampled"] = HERE
    if opts.before_root is not None:
        sides = {"today": opts.before_root.resolve(), **sides}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    loads = []
    for i in range(opts.rounds):
        for side, root in sides.items():
            loads.append(os.getloadavg()[0])
            runs[side].append(run_side(root, side, opts.cycle_seconds, opts.sample or 1.0))
            print(f"round {i + 1} {side}: {runs[side][-1]}", flush=True)
    median = {side: medians(found) for side, found in runs.items()}
    ratios: dict[str, Any] = {
        "on_vs_off": round(median["on"]["runs_per_s"] / median["off"]["runs_per_s"], 3),
        "on_vs_off_of_plain_ratio": round(median["on"]["vs_plain_celery"]
                                          / median["off"]["vs_plain_celery"], 3)}
    if "on_lean" in median:
        ratios["on_lean_vs_off"] = round(median["on_lean"]["runs_per_s"]
                                         / median["off"]["runs_per_s"], 3)
    if "on_sampled" in median:
        ratios["on_sampled_vs_off"] = round(median["on_sampled"]["runs_per_s"]
                                            / median["off"]["runs_per_s"], 3)
    if "today" in median:
        ratios["off_vs_today"] = round(median["off"]["runs_per_s"]
                                       / median["today"]["runs_per_s"], 3)
        ratios["off_vs_today_of_plain_ratio"] = round(median["off"]["vs_plain_celery"]
                                                      / median["today"]["vs_plain_celery"], 3)
    command = (f"python -m bench.bench_tracing --rounds {opts.rounds} --cycle-seconds "
               f"{opts.cycle_seconds}" + (" --before-root <checkout>" if opts.before_root else "")
               + (" --lean" if opts.lean else "")
               + (f" --sample {opts.sample}" if opts.sample is not None else ""))
    write_result(opts.result, {
        "command": command, "before_root": str(opts.before_root or ""),
        "load_avg_1m_at_each_run": {"min": min(loads), "median": statistics.median(loads),
                                    "max": max(loads)},
        "goal": "off >= 0.99x today's full cycle, on >= 0.8x", "sample": opts.sample,
        "ratios": ratios, "median": median, "runs": runs,
    })
    print(" ".join(f"{name}={value}" for name, value in ratios.items()))


if __name__ == "__main__":
    main()
