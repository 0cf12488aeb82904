"""``apply_async`` of a stored call returns a Celery AsyncResult: Celery code written for
plain Celery (``state``, ``ready``, ``revoke``, ``app.control.revoke``, ``get``) runs
on it unchanged, against the real store, broker, result backend (Redis), a real
worker and a real ``recur scheduler``."""

from __future__ import annotations

import os
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from scheduler.calls import ScheduledJob
from scheduler.store import DueStore
from scheduler.store.control import JobControl
from tasks.cli.worker import celery_executable
from tasks.process import process_message
from tests.support import services
from tests.support.processes import recur_argv, wait_for
from tests.support.result_tasks import INCLUDE, answer, runs
from tests.support.scheduler_support import worker_env


def message(ident: str, n: int = 1, user: str = "u-1", **payload: Any) -> dict[str, Any]:
    return {"id": ident, "user_id": user, "bucket": "short", "payload": {"n": n, **payload}}


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_a_stored_call_answers_like_an_async_result(store_in_use: DueStore, broker: Any,
                                                    celery_app: Any) -> None:
    key = fresh("sched")
    before = datetime.now(UTC)
    r = answer.apply_async((message(key),), countdown=3600)
    assert isinstance(r, AsyncResult) and issubclass(type(r), ScheduledJob)
    assert r.id == r.job_key == key and r.due_at >= before + timedelta(seconds=3600)
    assert r.state == r.status == "SCHEDULED" and not r.ready() and not r.successful()
    assert celery_app.AsyncResult(key).state == "SCHEDULED"  # rebuilt from the id
    with pytest.raises(CeleryTimeout):
        r.get(timeout=0.3)
    got: list[Any] = []  # the scheduler's claim: leased, published
    far = datetime.now(UTC) + timedelta(hours=2)
    store_in_use.dispatch("short", 10, far, far + timedelta(minutes=5), got.extend)
    assert [c.job_key for c in got] == [key]
    assert r.state == "DISPATCHED" and not r.ready()
    ignored = process_message.apply_async((message(fresh("ign")),), countdown=3600)
    assert ignored.state == "SCHEDULED" and ignored.get(timeout=1) is None  # as Celery
    plain = answer.apply_async((message(fresh("now")),))  # to the broker: plain Celery
    assert plain.state == "PENDING" and plain.stored is False
    assert celery_app.AsyncResult(str(uuid.uuid4())).state == "PENDING"


def test_plain_celery_code_on_stored_calls(fresh_pg_url: str, use_store: Any, broker: Any,
                                           celery_app: Any, start_worker: Any,
                                           start_scheduler: Any) -> None:
    use_store(fresh_pg_url)
    env = worker_env(fresh_pg_url)
    start_worker("short", env=env, args=INCLUDE)
    ctl = JobControl(DueStore.open(fresh_pg_url))
    revoked, by_control, by_cli, ran = (fresh(n) for n in ("rev", "ctl", "cli", "ran"))
    calls = {k: answer.apply_async((message(k, n=21),), countdown=3600)
             for k in (revoked, by_control, by_cli)}
    assert {r.state for r in calls.values()} == {"SCHEDULED"}

    # Celery's own revoke calls, unchanged: the row is gone, REVOKED is stored.
    calls[revoked].revoke(wait=True, timeout=5)  # wait: the worker has the id revoked
    celery_app.control.revoke(calls[by_control].id)
    cli = subprocess.run([celery_executable(), "-A", "tasks", "control", "revoke", by_cli],
                         cwd=services.ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, **services.test_environment(), **env})
    assert cli.returncode == 0, cli.stderr
    for key in (revoked, by_control, by_cli):
        assert ctl.get(key) is None, key
        assert celery_app.AsyncResult(key).state == "REVOKED"
    with pytest.raises(TaskRevokedError):
        calls[revoked].get(timeout=5)

    # A job created again under a revoked key runs (the worker's revoked ids do not
    # stop it); a short countdown, a real scheduler, Celery's get().
    again = answer.apply_async((message(revoked, n=5),), countdown=30)
    first = answer.apply_async((message(ran, n=3),), countdown=30)
    assert again.state == first.state == "SCHEDULED"  # the old REVOKED was forgotten
    start_scheduler(env)  # an idle bucket pulls them forward
    assert first.get(timeout=60) == {"id": ran, "answer": 6}
    assert first.state == "SUCCESS" and first.successful() and first.ready()
    assert again.get(timeout=60) == {"id": revoked, "answer": 10}
    assert sorted(runs()[-2:]) == sorted([ran, revoked])
    assert by_control not in runs() and by_cli not in runs()  # revoked: never ran

    # A recurring job: not over while it has a row; result is its latest run's.
    recurring = fresh("rec")
    r = answer.apply_async((message(recurring, n=1, again=2),), countdown=30)
    wait_for(lambda: r.result is not None, 60, "the recurring job's first run")
    assert r.state in ("SCHEDULED", "DISPATCHED") and not r.ready()
    assert r.get(timeout=60) == {"id": recurring, "answer": 6}  # its third, last run
    assert r.state == "SUCCESS" and runs().count(recurring) == 3
    assert ctl.get(recurring) is None


def test_a_canvas_of_delayed_calls_runs_under_the_ids_celery_froze(
        fresh_pg_url: str, use_store: Any, broker: Any, start_worker: Any,
        start_scheduler: Any) -> None:
    """A frozen signature and a group of delayed signatures go to the store under the task
    ids Celery froze for them: the results canvas handed out are the stored runs'."""
    from celery import group

    use_store(fresh_pg_url)
    env = worker_env(fresh_pg_url)
    start_worker("short", env=env, args=INCLUDE)
    sig = answer.s(message(fresh("sig"), n=4)).set(countdown=30)
    frozen = sig.freeze()
    assert sig.apply_async().id == frozen.id
    grouped = group(answer.s(message(fresh("grp"), n=n)).set(countdown=30)
                    for n in (1, 2)).apply_async()
    assert {r.state for r in grouped.results} == {"SCHEDULED"}
    start_scheduler(env)  # an idle bucket pulls them forward
    assert frozen.get(timeout=60)["answer"] == 8
    assert [r["answer"] for r in grouped.get(timeout=60)] == [2, 4]


def test_a_cancel_from_the_command_line_or_the_page_stores_revoked(
        store_url: str, use_store: Any, broker: Any, celery_app: Any) -> None:
    """``recur jobs cancel`` and ``recur jobs cancel --user`` (real processes) and the
    Scheduled page's cancel and per-user cancel are a revoke for each job's AsyncResult:
    the rows are gone and REVOKED is stored (SQLite and PostgreSQL)."""
    from tasks.cli.scheduled_actions import Form, perform

    use_store(store_url)
    ctl = JobControl(DueStore.open(store_url))
    env = {**os.environ, **services.test_environment(), **worker_env(store_url)}
    by_cli, by_page, kept = (fresh(n) for n in ("jcli", "page", "kept"))
    cli_user, page_user = fresh("ucli"), fresh("upage")
    of_user = {user: [fresh(user) for _ in range(3)] for user in (cli_user, page_user)}
    calls = {k: answer.apply_async((message(k),), countdown=3600)
             for k in (by_cli, by_page, kept)}
    calls |= {k: answer.apply_async((message(k, user=user),), countdown=3600)
              for user, ks in of_user.items() for k in ks}
    assert {r.state for r in calls.values()} == {"SCHEDULED"}

    done = subprocess.run(recur_argv("jobs", "cancel", by_cli), cwd=services.ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cancelled job {by_cli} (it was scheduled")
    line = perform("cancel", Form(key=by_page))
    assert line.startswith(f"cancelled job {by_page} (it was scheduled")
    done = subprocess.run(recur_argv("jobs", "cancel", "--user", cli_user), cwd=services.ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"cancelled 3 job(s) of user {cli_user}: 3 scheduled, 0 dispatched\n"
    line = perform("cancel-user", Form(target_user=page_user))
    assert line == f"cancelled 3 job(s) of user {page_user}: 3 scheduled, 0 dispatched"

    for key in (by_cli, by_page, *of_user[cli_user], *of_user[page_user]):
        assert ctl.get(key) is None, key
        assert celery_app.AsyncResult(key).state == calls[key].state == "REVOKED"
        with pytest.raises(TaskRevokedError):
            calls[key].get(timeout=5)
    assert calls[kept].state == "SCHEDULED"  # only the cancelled keys were marked
    again = subprocess.run(recur_argv("jobs", "cancel", by_cli), cwd=services.ROOT,
                           capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 2 and f"no job {by_cli!r}" in again.stderr
    assert celery_app.AsyncResult(by_cli).state == "REVOKED"
    ctl.store.close()
