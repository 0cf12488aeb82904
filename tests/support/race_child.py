"""A producer for the same-key race test (tests/integration/test_job_races.py): once it
reads ``go`` on stdin, ``THREADS`` threads each make one call on job key ``KEY``, each
with its own version (payload and due time, :func:`version_call`), half through
``apply_async`` (countdown or eta) and half through ``apply_many``. It prints one line
per call, ``ok V`` or ``error V <the error's one line>``.

    python -m tests.support.race_child KEY FIRST_VERSION THREADS
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from tasks.process import process_message

#: A far eta: an eta call's version V is due at ETA_BASE + V * SPACING.
ETA_BASE = datetime(2031, 1, 1, tzinfo=UTC)
#: A countdown call's version V is due SPACING * V + COUNTDOWN_BASE seconds after its call.
COUNTDOWN_BASE = 7200
#: Seconds between two versions' due times: far more than a test run takes.
SPACING = 100
#: Added to a version given first of two calls of one ``apply_many``: never the row's.
DECOY = 10_000


def message(key: str, version: int) -> dict[str, Any]:
    return {
        "id": f"m-{key}",
        "user_id": "u-race",
        "bucket": "short",
        "payload": {"version": version, "pad": "x" * (version % 7)},
    }


def version_call(key: str, version: int) -> None:
    """Write version ``version`` of job ``key``: the way and the delay follow from it."""
    msg, way = message(key, version), version % 4
    if way == 0:
        process_message.apply_async(
            (msg,), countdown=COUNTDOWN_BASE + SPACING * version, job_key=key
        )
    elif way == 1:
        process_message.apply_async(
            (msg,), eta=ETA_BASE + timedelta(seconds=SPACING * version), job_key=key
        )
    elif way == 2:  # the key twice in one call: its last call is this version
        decoy = message(key, DECOY + version)
        process_message.apply_many(
            [
                process_message.s(decoy).set(job_key=key, countdown=COUNTDOWN_BASE),
                process_message.s(msg).set(
                    job_key=key, eta=ETA_BASE + timedelta(seconds=SPACING * version)
                ),
            ]
        )
    else:
        process_message.apply_many(
            [process_message.s(msg).set(job_key=key, countdown=COUNTDOWN_BASE + SPACING * version)]
        )


def main() -> None:
    key, first, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    process_message.apply_async((message("warm", 0),), countdown=3600)  # store opened once
    printing = threading.Lock()
    go = threading.Event()

    def call(version: int) -> None:
        go.wait()
        try:
            version_call(key, version)
            line = f"ok {version}"
        except Exception as exc:  # reported to the test, which fails on it
            line = f"error {version} {type(exc).__name__}: {' '.join(str(exc).split())}"
        with printing:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    pool = [threading.Thread(target=call, args=(first + n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    go.set()
    for thread in pool:
        thread.join()


if __name__ == "__main__":
    main()
