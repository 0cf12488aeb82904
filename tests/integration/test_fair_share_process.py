"""Fair share with a real scheduler and worker: a noisy user's backlog does not hold back
quiet users due a second later; with RECUR_FAIR_SHARE=0 they wait for all of it; every
job runs once; ``recur status --json`` shows what was dealt."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.store import DueStore, Job
from tests.integration.test_cli_errors import run_recur
from tests.support.processes import wait_for
from tests.support.scheduler_support import RunLog, worker_env

NOISY, QUIET = 300, 20


def backlog(run: str, now: datetime) -> tuple[list[Job], set[str]]:
    """A noisy user's one-shot jobs due 2 s ago, quiet users' one each due 1 s ago."""
    def job(key: str, user: str, due: datetime) -> Job:
        msg = {"id": key, "user_id": user, "bucket": "short", "payload": None}
        return Job(key, "tasks.process_message", "short",
                   json.dumps({"args": [msg], "kwargs": {}}), due)

    noisy = [job(f"{run}-n{i:03}", f"{run}-noisy", now - timedelta(seconds=2))
             for i in range(NOISY)]
    quiet = [job(f"{run}-q{i:02}", f"{run}-quiet-{i}", now - timedelta(seconds=1))
             for i in range(QUIET)]
    return noisy + quiet, {j.job_key for j in quiet}


def run_backlog(store: DueStore, run: str, start: Any, env: dict[str, str]) -> list[str]:
    """Seed the backlog, start a scheduler, wait for every job; the keys in run order."""
    jobs, _ = backlog(run, datetime.now(UTC))
    store.schedule(jobs, datetime.now(UTC))
    log = RunLog()
    scheduler = start(env)
    wanted = {j.job_key for j in jobs}
    wait_for(lambda: wanted <= set(log.poll()), 120, f"every job of {run} to run")
    scheduler.stop()
    order = [c.message_id for c in sorted(log.entries, key=lambda c: c.started)
             if c.message_id in wanted]
    assert sorted(order) == sorted(wanted)  # each ran once: none lost, none twice
    return order


def test_a_noisy_backlog_does_not_hold_back_quiet_users(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any,
        tmp_path: Path) -> None:
    env = worker_env(fresh_pg_url, RECUR_WORK_SCALE="0.2", RECUR_LOW_WATERMARK="10",
                     RECUR_HIGH_WATERMARK="30", RECUR_DRAIN_BATCH="10",
                     RECUR_FAIR_SHARE_QUOTA="5")
    start_worker("short", concurrency=2, env=env)
    store = DueStore.open(fresh_pg_url)
    run = f"fs{time.time_ns()}"
    order = run_backlog(store, run, start_scheduler, env)
    quiet = [i for i, key in enumerate(order) if "-q" in key]
    # The first fills were the noisy user's (a queue of 30 and the batches in hand):
    # once the scheduler saw it was behind, the quiet users went first.
    assert max(quiet) < 80, quiet
    result = run_recur(["status", "--json"], {"RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    assert result.returncode == 0, result.stderr
    short = json.loads(result.stdout)["fair_share"]["short"]
    assert short["dealt_ever"] >= QUIET and short["dealt_rows"] == 0 and short["enabled"]
    table = run_recur(["status"], {"RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    assert "fair share, short: 0 due row(s) dealt into rounds" in table.stdout

    # Off: strict due order, the quiet users after the whole noisy backlog.
    order = run_backlog(store, f"{run}-off", start_scheduler,
                        {**env, "RECUR_FAIR_SHARE": "0"})
    quiet = [i for i, key in enumerate(order) if "-q" in key]
    # Messages already prefetched by the two pool processes may start out of order.
    assert min(quiet) >= NOISY - 16, quiet
    store.close()
