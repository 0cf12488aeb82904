"""Users' own task modules (RECUR_IMPORTS), from a directory outside the package: sync
and async tasks, recurring through the scheduler with a countdown, under @user_lock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scheduler.store import DueStore, Job
from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for, wait_for_worker
from tests.support.refusals import refusal_line, service_environment
from tests.support.scheduler_support import wait_until_empty, worker_env
from tests.support.user_module import user_records, write_user_module

RUNS = 3


def user_env(store_url: str, module_dir: Path, module: str) -> dict[str, str]:
    return worker_env(store_url, RECUR_IMPORTS=module, RECUR_SCHEDULE_THRESHOLD="0.5",
                      PYTHONPATH=os.pathsep.join([str(module_dir), str(services.ROOT)]))


def start_recur_worker(celery_app: Any, bucket: str, env: dict[str, str], logs: Path) -> Child:
    node = f"{bucket}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    child = spawn(node.split("@")[0], recur_argv("worker", bucket, "-n", node,
                                                 "--without-mingle", "--without-gossip"),
                  logs, {**os.environ, **services.test_environment(), **env}, cwd=services.ROOT)
    try:
        wait_for_worker(celery_app, child, node)
    except BaseException:
        child.stop()
        raise
    return child


def jobs(module: str, task: str, bucket: str, users: int, per_user: int) -> list[Job]:
    now, out = datetime.now(UTC), []
    for u in range(users):
        for i in range(per_user):
            msg = {"id": f"{task}-{u}-{i}-{uuid.uuid4().hex[:4]}", "user_id": f"{task}-user-{u}",
                   "bucket": bucket, "payload": {"run": 1, "runs": RUNS, "every": 1, "ms": 50}}
            out.append(Job(msg["id"], f"{module}.{task}", bucket,
                           json.dumps({"args": [msg], "kwargs": {}}), now))
    return out


def overlaps(records: list[dict[str, Any]]) -> list[str]:
    """Users with two runs open at once (the lock failed)."""
    open_runs: dict[str, int] = defaultdict(int)
    bad = []
    for r in sorted(records, key=lambda r: (r["t"], r["ev"] == "start")):
        open_runs[r["user"]] += 1 if r["ev"] == "start" else -1
        if open_runs[r["user"]] > 1:
            bad.append(r["user"])
    return bad


def test_own_sync_and_async_tasks_recur_through_the_scheduler_under_the_user_lock(
        celery_app: Any, fresh_pg_url: str, broker: Any, redis_client: Any, tmp_path: Path,
        start_worker: Any, start_scheduler: Any) -> None:
    module = write_user_module(tmp_path / "userpkg")
    env = user_env(fresh_pg_url, tmp_path / "userpkg", module)
    start_worker("short", env=env)  # plain `celery -A tasks worker -Q short`
    io_worker = start_recur_worker(celery_app, "io", env, tmp_path / "logs")
    store = DueStore.open(fresh_pg_url)
    all_jobs = (jobs(module, "sync_job", "short", users=2, per_user=2)
                + jobs(module, "async_job", "io", users=2, per_user=3))
    store.schedule(all_jobs, datetime.now(UTC))
    start_scheduler(env)
    prefix = services.KEY_PREFIX

    def finished() -> int:
        return sum(1 for r in user_records(redis_client, prefix) if r["ev"] == "end")

    try:
        wait_for(lambda: finished() >= RUNS * len(all_jobs), 90, "every run of every job")
        wait_until_empty(store, 30)
    finally:
        io_worker.stop()
        store.close()
    records = user_records(redis_client, prefix)
    ends = [r for r in records if r["ev"] == "end"]
    runs = sorted((r["id"], r["run"]) for r in ends)
    assert runs == sorted((j.job_key, n) for j in all_jobs for n in range(1, RUNS + 1))
    assert not overlaps(records)
    async_runs = [r for r in records if r["kind"] == "async"]
    assert {r["thread"] for r in async_runs} == {"recur-asyncio"}
    assert len({(r["pid"], r["loop"]) for r in async_runs}) == 1  # one loop, every task


def test_a_task_module_that_cannot_be_imported_is_one_line_and_nothing_starts(
        fresh_pg_url: str) -> None:
    env = {**os.environ, **services.test_environment(), "RECUR_DATABASE_URL": fresh_pg_url,
           "RECUR_IMPORTS": "no_such_module_for_recur"}
    for command in (("worker", "io"), ("scheduler",)):
        done = subprocess.run(recur_argv(*command), env=env, capture_output=True, text=True,
                              timeout=60, cwd=services.ROOT)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "recur: RECUR_IMPORTS: cannot import 'no_such_module_for_recur': "
            "ModuleNotFoundError: No module named 'no_such_module_for_recur'"]


def test_a_task_module_that_exits_at_import_is_one_line_naming_it(
        fresh_pg_url: str, tmp_path: Path) -> None:
    """sys.exit(3), SystemExit or KeyboardInterrupt in a user's module: no silent exit 3."""
    modules = {"exits_three": ("import sys\nsys.exit(3)\n", "SystemExit(3)"),
               "raises_exit": ("raise SystemExit('bye')\n", "SystemExit('bye')"),
               "interrupts": ("raise KeyboardInterrupt\n", "KeyboardInterrupt")}
    for module, (source, said) in modules.items():
        (tmp_path / f"{module}.py").write_text(source)
        env = service_environment(RECUR_DATABASE_URL=fresh_pg_url, RECUR_IMPORTS=module,
                                  PYTHONPATH=os.pathsep.join([str(tmp_path),
                                                              str(services.ROOT)]))
        for command in (("worker", "io"), ("scheduler",)):
            done = subprocess.run(recur_argv(*command), env=env, capture_output=True,
                                  text=True, timeout=60, cwd=services.ROOT)
            line = refusal_line(done)
            assert f"RECUR_IMPORTS: cannot import {module!r}" in line and said in line, line
