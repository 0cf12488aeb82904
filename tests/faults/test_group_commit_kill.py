"""A producer killed (``kill -9``) in the middle of group commits loses only calls that
had not returned: every job key a call returned for is in the store (read from here,
another process). SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.integration.test_group_commit import keys_in, other_connection
from tests.support import services

pytestmark = pytest.mark.services

THREADS = 16
#: Calls returned before the kill (then it lands while commits are in flight).
RETURNED = 400


@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)
def test_every_call_that_returned_survives_a_kill(store_url: str) -> None:
    env = {**os.environ, "RECUR_DATABASE_URL": store_url, "RECUR_GROUP_COMMIT": "1"}
    child = subprocess.Popen([sys.executable, "-m", "tests.support.enqueue_child",
                              str(THREADS)], cwd=services.ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    returned: list[str] = []
    try:
        while len(returned) < RETURNED:
            line = child.stdout.readline()
            if not line:
                raise AssertionError(f"the producer ended: {child.stderr.read()!r}"
                                     if child.stderr else "the producer ended")
            returned.append(line.decode().strip())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
    lines = rest.decode().split("\n")
    returned += [line for line in lines[:-1] if line]  # the last one may be cut short
    with other_connection(store_url) as conn:
        stored = set(keys_in(conn))
    assert child.returncode == -signal.SIGKILL
    assert set(returned) - stored == set()
    assert len(stored) >= len(returned)  # calls in flight may have committed too
