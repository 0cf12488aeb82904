"""Shared by the benchmarks: print figures and write them as JSON under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_1m": os.getloadavg()[0]}


def write_result(name: str, figures: dict[str, Any]) -> Path:
    """Print ``figures`` and write them to ``bench/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    doc = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": machine(), **figures}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(json.dumps(doc, indent=2, default=str))
    print(f"written to {path}")
    return path
