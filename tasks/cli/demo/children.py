"""Start and stop recur processes as children: the demo's (tests and benchmarks reuse
them through tests/support/processes.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from celery import Celery


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; TimeoutError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Child:
    """A child process in its own process group, with its output in a log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        """Everything the child has written so far."""
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        """``kill -9`` the child and everything it forked (a real crash)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Celery's warm shutdown), then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
            except ProcessLookupError:
                pass
        self._log.close()


def spawn(name: str, argv: list[str], log_dir: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> Child:
    """Start ``argv`` in a new session, output to ``log_dir/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{name}.log"
    log = path.open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(env if env is not None else os.environ), cwd=cwd)
    return Child(name=name, proc=proc, log_path=path, _log=log)


def recur_argv(*args: str) -> list[str]:
    """Command line running ``recur <args>`` with this interpreter."""
    return [sys.executable, "-m", "config.entry", *args]


def wait_for_worker(app: Celery, child: Child, nodename: str, timeout: float = 60.0) -> None:
    """Wait until worker ``nodename`` answers a ping (and has not died)."""
    def answers() -> bool:
        if child.proc.poll() is not None:
            raise RuntimeError(f"worker {nodename} exited with {child.proc.returncode}:\n"
                               f"{child.log()[-3000:]}")
        return bool(app.control.ping(destination=[nodename], timeout=0.5))

    wait_for(answers, timeout, f"worker {nodename} to answer ping")
