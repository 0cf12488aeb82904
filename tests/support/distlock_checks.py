"""Submitting locked jobs and checking their recorded runs (distlock tests and bench)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import redis

from tests.support.locked_tasks import locked_work, read_runs

INCLUDE = ("--include", "tests.support.fault_tasks,tests.support.locked_tasks")


def message(user: str, i: int, **payload: Any) -> dict[str, Any]:
    return {"id": f"{user}-{i}", "user_id": user, "bucket": "short", "payload": payload}


def submit_interleaved(users: int, jobs: int, run: str, **payload: Any) -> dict[str, list[str]]:
    """Publish every user's jobs in a random interleaving that keeps each user's order."""
    rng = random.Random(4)
    pending = {f"{run}-u{u}": 0 for u in range(users)}
    submitted: dict[str, list[str]] = defaultdict(list)
    while pending:
        user = rng.choice(sorted(pending))
        msg = message(user, pending[user], **payload)
        locked_work.delay(msg)
        submitted[user].append(msg["id"])
        pending[user] += 1
        if pending[user] == jobs:
            del pending[user]
    return submitted


def runs_by_user(client: redis.Redis, users: set[str]) -> dict[str, list[dict[str, Any]]]:
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in read_runs(client):
        if entry["user"] in users:
            by_user[entry["user"]].append(entry)
    return by_user


def ended(client: redis.Redis, ids: set[str]) -> set[str]:
    return {e["id"] for e in read_runs(client) if e["ev"] == "end" and e["id"] in ids}


def assert_one_at_a_time_in_order(runs: list[dict[str, Any]], order: list[str]) -> None:
    """Records alternate start/end of the same job (no overlap), every run held the
    lock (has a fencing token), starts follow ``order`` and fencing tokens only grow."""
    starts = [e for e in runs if e["ev"] == "start"]
    assert [e["id"] for e in starts] == order, "start order differs from submission order"
    for start, end in zip(runs[::2], runs[1::2], strict=True):
        assert (start["ev"], end["ev"], start["id"]) == ("start", "end", end["id"]), runs
        assert start["fence"] is not None, f"{start['id']} ran without its lock"
    fences = [e["fence"] for e in starts]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def assert_order_kept_through_faults(runs: list[dict[str, Any]], order: list[str],
                                     killed: dict[int, float]) -> int:
    """The user's records after kills (``killed``: pid -> time it was killed): every job
    ended (0 lost); no run overlapped one that went on to end (0 overlaps); no job
    started after a later job of its user started (0 inversions, 0 stale re-runs);
    a job ran again only after its previous run's process was killed. Returns how
    many runs were repeated."""
    place = {job: i for i, job in enumerate(order)}
    ends = {e["id"] for e in runs if e["ev"] == "end"}
    assert ends == set(order), f"lost: {sorted(set(order) - ends)[:5]}"
    highest, open_run, repeats = -1, None, 0
    last_start: dict[str, dict[str, Any]] = {}
    for entry in runs:
        if entry["ev"] == "end":
            assert open_run is not None and open_run["id"] == entry["id"] \
                and open_run["pid"] == entry["pid"], f"overlap or stray end: {entry}"
            open_run = None
            continue
        assert entry["fence"] is not None, f"{entry['id']} ran without its lock"
        if open_run is not None:  # the run before never ended: it must have been killed
            assert killed.get(open_run["pid"], 0) >= open_run["t"], \
                f"{entry['id']} started while {open_run['id']} ran: overlap"
        assert place[entry["id"]] >= highest, \
            f"{entry['id']} started after a later job of its user: inversion / stale re-run"
        previous = last_start.get(entry["id"])
        if previous is not None:
            repeats += 1
            assert killed.get(previous["pid"], 0) >= previous["t"], \
                f"{entry['id']} ran again though its run in pid {previous['pid']} was not killed"
        highest, open_run, last_start[entry["id"]] = place[entry["id"]], entry, entry
    return repeats
