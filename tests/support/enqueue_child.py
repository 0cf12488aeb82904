"""A producer for the group-commit kill test (tests/faults/test_group_commit_kill.py):
``THREADS`` threads call ``apply_async(countdown=3600)`` without end, each printing a
call's job key on its own line once the call has returned, until it is killed.

    python -m tests.support.enqueue_child THREADS
"""

from __future__ import annotations

import sys
import threading

from tasks.process import process_message


def message(key: str) -> dict[str, object]:
    return {"id": key, "user_id": "u-1", "bucket": "short", "payload": {"n": 1}}


def main() -> None:
    threads = int(sys.argv[1])
    printing = threading.Lock()
    process_message.apply_async((message("warm-up"),), countdown=3600)

    def calls(t: int) -> None:
        i = 0
        while True:
            key = f"k{t}-{i}"
            process_message.apply_async((message(key),), countdown=3600)
            with printing:  # returned: its row must be in the store from now on
                sys.stdout.write(key + "\n")
                sys.stdout.flush()
            i += 1

    for t in range(threads):
        threading.Thread(target=calls, args=(t,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
