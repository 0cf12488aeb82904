"""Benchmarks a busy machine cannot fool (bench/quiet.py, bench/cpu_share.py,
bench/results_io.py): another process's CPU is seen as other load, the benchmark's own
tree and marked processes are not, a quiet run writes its result with the machine block
and every repeat, a busy one is refused (exit 2) unless ``--allow-busy``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cpu_share import MARK, Classifier, measure, read_all

ROOT = Path(__file__).resolve().parents[2]
NESTED = "import time\nend = time.time() + 1\nwhile time.time() < end: pass"
SPIN = [sys.executable, "-c", "import time\nend = time.time() + 120\nwhile time.time() < end: pass"]

#: A benchmark in miniature: begins its session, spins a child of its own for 1.5 s,
#: then writes three repeats. With WATCH_STRICT, the threshold is lowered to 0.25 cores
#: after the start (so the wait before the run passes whatever the machine does).
FAKE_BENCH = """
import os, subprocess, sys, time
from bench import quiet
quiet.begin()
from bench.results_io import write_result
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.time() + 1.5\\nwhile time.time() < end: pass"])
child.wait()
time.sleep(0.5)
if os.environ.get("WATCH_STRICT"):
    quiet.current().threshold = 0.25
write_result("fake", {"runs_per_s": 2}, repeats=[{"runs_per_s": 1}, {"runs_per_s": 3},
                                                  {"runs_per_s": 2}])
"""


def spinner(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(SPIN, env={**os.environ, **(env or {})})


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    """A process using a whole core, outside any benchmark's tree."""
    proc = spinner()
    yield proc
    proc.kill()
    proc.wait()


def run_fake(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE_BENCH)
    full = {**{k: v for k, v in os.environ.items() if k != MARK},
            "PYTHONPATH": str(ROOT), "RECURBENCH_RESULTS": str(tmp_path / "results"), **env}
    return subprocess.run([sys.executable, str(script), *args], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_other_process_cpu_is_attributed_to_other(busy: subprocess.Popen[bytes]) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    marked = spinner({MARK: "tok-test"})  # not in the tree, but carries the run's mark
    try:
        classifier = Classifier(sleeper.pid, "tok-test")  # the "benchmark" is the sleeper
        time.sleep(0.3)
        procs = read_all()
        assert classifier.side(procs[busy.pid], procs) == "other"
        assert classifier.side(procs[marked.pid], procs) == "own"
        assert classifier.side(procs[sleeper.pid], procs) == "own"
        # a short-lived grandchild, reaped within the window: counted once, not twice
        nested = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{NESTED}'; true"])
        window = measure(classifier, 3.0)
    finally:
        for proc in (sleeper, marked, nested):
            proc.kill()
            proc.wait()
    # each spinner wants a core; on a shared, loaded 2-core machine it gets less
    assert window.cores["other"] >= 0.3, window
    assert window.cores["own"] >= 0.1, window
    assert "python" in " ".join(window.top_other), window
    assert sum(window.cores.values()) <= window.machine_busy_cores + 0.25, window


def test_a_quiet_run_writes_machine_block_and_repeats(tmp_path: Path) -> None:
    done = run_fake(tmp_path, RECURBENCH_BUSY_CORES="64")
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "results" / "fake.json").read_text())
    assert doc["busy"] is False
    assert doc["median"] == {"runs_per_s": 2}
    assert [r["runs_per_s"] for r in doc["repeats"]] == [1, 3, 2]
    block = doc["machine"]
    for key in ("cores", "load_1m_before", "load_1m_during_max", "other_cores_before",
                "other_cores_during", "services_cores_during", "own_cores_during"):
        assert key in block, key
    # its own child's 1.5 s spin is its own (whatever share of a core it got)
    assert block["own_cores_during"] * block["during"]["seconds"] >= 0.2, block


def test_a_busy_run_is_refused_then_written_with_allow_busy(
        tmp_path: Path, busy: subprocess.Popen[bytes]) -> None:
    refused = run_fake(tmp_path, RECURBENCH_BUSY_CORES="64", WATCH_STRICT="1")
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("recur bench: not written: "), refused.stderr
    assert "cores during the run" in line
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "results" / "fake.json").exists()
    assert '"runs_per_s": 2' in refused.stdout  # the figures are printed, not lost

    allowed = run_fake(tmp_path, "--allow-busy", RECURBENCH_BUSY_CORES="64", WATCH_STRICT="1")
    assert allowed.returncode == 0, allowed.stderr
    doc = json.loads((tmp_path / "results" / "fake.json").read_text())
    assert doc["busy"] is True
    assert doc["machine"]["other_cores_during"] > 0.25


def test_a_busy_machine_is_not_started_on(tmp_path: Path,
                                          busy: subprocess.Popen[bytes]) -> None:
    done = run_fake(tmp_path, RECURBENCH_BUSY_CORES="0.25", RECURBENCH_QUIET_WAIT="0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("recur bench: not started: other "
                                                           "processes used ")
    assert not (tmp_path / "results").exists()


def test_a_bad_threshold_is_one_line(tmp_path: Path) -> None:
    done = run_fake(tmp_path, RECURBENCH_BUSY_CORES="lots")
    assert done.returncode == 2
    assert done.stderr.strip() == ("recur bench: RECURBENCH_BUSY_CORES must be a number >= 0, "
                                   "got 'lots'")
