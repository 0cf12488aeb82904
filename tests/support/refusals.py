"""A recur process refused to start: what every such test checks of it."""

from __future__ import annotations

import os
import subprocess

from tests.support import services


def service_environment(**env: str) -> dict[str, str]:
    """This run's services and ``env``, with no RECUR_* setting of the caller's shell."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    return {**full, **services.test_environment(), **env}


def refusal_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``recur: ...`` line of a process that exited 2 without a traceback."""
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    said = [line for line in result.stderr.splitlines() if line.startswith("recur:")]
    assert len(said) == 1, out
    return said[0]
