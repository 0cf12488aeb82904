"""A progress line while the seed runs, from Spark's status tracker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from pyspark import SparkContext

INTERVAL = 5.0


def progress_line(context: SparkContext, step: str, started: float) -> str:
    """``seed: <step>: <done>/<total> partitions, <s>s`` for the running stages."""
    tracker = context.statusTracker()
    done = total = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return f"seed: {step}: {done}/{total} partitions done, {time.monotonic() - started:.0f}s"


class Progress:
    """Prints a progress line every ``interval`` seconds while the block runs."""

    def __init__(self, context: SparkContext, emit: Callable[[str], None],
                 interval: float = INTERVAL) -> None:
        self.context, self.emit, self.interval = context, emit, interval
        self.step = "starting"
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seed-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.emit(progress_line(self.context, self.step, self.started))

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
