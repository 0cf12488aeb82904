"""Tracing over a real scheduler and a real worker: a recurring job's three runs are
one chain of linked spans, under the scheduler's claim and publish spans, each with
the store's write of its reschedule."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler.store import DueStore, Job
from scheduler.wire import encode_call
from tests.support import services
from tests.support.otel_sink import SPANS_DIR, read_spans
from tests.support.processes import recur_argv, wait_for
from tests.support.scheduler_support import (
    RECURRING,
    recurring_message,
    wait_until_empty,
    worker_env,
)

RUN_SPAN = f"run/{RECURRING}"


def runs_of(spans: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s["name"] == RUN_SPAN
                   and s["attributes"].get("recur.job_key") == key), key=lambda s: s["start"])


@pytest.mark.parametrize("celery_mode", ["full", "lean"])
def test_three_runs_of_a_recurring_job_are_one_linked_chain(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any,
        tmp_path: Path, celery_mode: str) -> None:
    """Either run span (RECUR_OTEL_CELERY: the instrumentation's or recur's lean one)."""
    spans_dir = tmp_path / "spans"
    env = worker_env(fresh_pg_url, RECUR_OTEL="1", RECUR_OTEL_CELERY=celery_mode,
                     RECUR_OTEL_SETUP="tests.support.otel_sink:install",
                     **{SPANS_DIR: str(spans_dir)})
    start_worker("short", env=env)
    key = f"traced-{time.time_ns()}"
    message = recurring_message(key, "short", 1.0, 3)
    now = datetime.now(UTC)
    store = DueStore.open(fresh_pg_url)
    store.schedule([Job(key, RECURRING, "short", encode_call([message], {}, job_key=key,
                                                             bucket="short"), now)], now)
    start_scheduler(env)
    wait_for(lambda: len(runs_of(read_spans(spans_dir), key)) == 3, 60,
             "three traced runs of the job")
    wait_until_empty(store, 30)  # the third run finished the job
    store.close()
    spans = read_spans(spans_dir)
    by_id = {s["span_id"]: s for s in spans}
    first, second, third = runs_of(spans, key)

    # the chain: each run links to the run that rescheduled it, and only to that one
    assert first["links"] == []
    for earlier, later in ((first, second), (second, third)):
        assert [(link["trace_id"], link["span_id"]) for link in later["links"]] == [
            (earlier["trace_id"], earlier["span_id"])]
        assert later["links"][0]["attributes"] == {"recur.link": "scheduled by"}
    assert {run["service"] for run in (first, second, third)} == {"recur-worker"}
    for run in (first, second, third):  # the attributes both modes give a run's span
        assert run["attributes"]["celery.action"] == "run"
        assert run["attributes"]["celery.task_name"] == RECURRING
        assert run["attributes"]["messaging.destination"] == "short"

    # each run is a child of the scheduler's publish, itself inside its claim
    for run in (first, second, third):
        publish = by_id[run["parent"]]
        assert publish["name"] == "recur.publish" and publish["service"] == "recur-scheduler"
        assert publish["trace_id"] == run["trace_id"] and publish["attributes"]["recur.rows"] >= 1
        claim = by_id[publish["parent"]]
        assert claim["name"] == "recur.claim" and claim["parent"] is None
        assert claim["attributes"]["recur.bucket"] == "short"
        assert claim["attributes"]["recur.rows"] >= 1
        assert claim["attributes"]["recur.early"] in (True, False)

    # the first two runs wrote their reschedule under their own span; the last finished
    writes = [s for s in spans if s["name"] == "recur.reschedule"
              and s["attributes"]["recur.job_key"] == key]
    assert sorted(by_id[w["parent"]]["span_id"] for w in writes) == sorted(
        [first["span_id"], second["span_id"]])
    for write in writes:
        assert write["attributes"]["recur.accepted"] is True
        assert isinstance(write["attributes"]["recur.token"], int)
        datetime.fromisoformat(write["attributes"]["recur.due_at"])
    # no claim that found nothing is exported (the scheduler polls all day)
    assert all(s["attributes"]["recur.rows"] > 0 for s in spans if s["name"] == "recur.claim")


@pytest.mark.parametrize("celery_mode", ["lean", "full"])
def test_a_run_that_raises_is_an_error_span_with_its_exception(
        broker: Any, start_worker: Any, tmp_path: Path, celery_mode: str) -> None:
    """A task that raises: its run span has status ERROR and the exception recorded (lean
    mode's failure signal; the instrumentation's for comparison); a run that succeeds in
    the same worker is no error."""
    from tests.support import fault_tasks

    spans_dir = tmp_path / "spans"
    start_worker("short", concurrency=1, env={
        "RECUR_OTEL": "1", "RECUR_OTEL_CELERY": celery_mode,
        "RECUR_OTEL_SETUP": "tests.support.otel_sink:install", SPANS_DIR: str(spans_dir)})
    ident = f"traced-fail-{time.time_ns()}"
    failed = fault_tasks.always_fail.delay({"id": ident, "user_id": "u", "bucket": "short",
                                            "payload": None})
    ok = fault_tasks.count_run.delay({"id": f"{ident}-ok", "user_id": "u", "bucket": "short",
                                      "payload": None})

    def run_span(name: str, task_id: str) -> dict[str, Any] | None:
        return next((s for s in read_spans(spans_dir) if s["name"] == f"run/{name}"
                     and s["attributes"].get("messaging.message.id") == task_id), None)

    wait_for(lambda: run_span("tests.always_fail", failed.id) is not None
             and run_span("tests.count_run", ok.id) is not None, 60, "both run spans")
    span = run_span("tests.always_fail", failed.id)
    assert span is not None and span["status"] == "ERROR"
    assert f"boom {ident} attempt 1" in (span["status_description"] or "")
    raised = [e for e in span["events"] if e["name"] == "exception"]
    assert len(raised) == 1 and raised[0]["attributes"]["exception.type"] == "ValueError"
    assert raised[0]["attributes"]["exception.message"] == f"boom {ident} attempt 1"
    assert span["attributes"]["celery.task_name"] == "tests.always_fail"
    good = run_span("tests.count_run", ok.id)
    assert good is not None and good["status"] != "ERROR" and good["events"] == []


@pytest.mark.parametrize("args", [["worker", "short"], ["scheduler"]])
def test_tracing_that_cannot_work_refuses_to_start_in_one_line(
        live_services: None, sqlite_url: str, tmp_path: Path, args: list[str]) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("RECUR_", "OTEL_"))},
           **services.test_environment(), "RECUR_DATABASE_URL": sqlite_url,
           "RECUR_OTEL": "1", "OTEL_TRACES_EXPORTER": "nosuch"}
    result = subprocess.run(recur_argv(*args), env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    said = [line for line in result.stderr.splitlines() if line.startswith("recur:")]
    assert said == ["recur: OTEL_TRACES_EXPORTER: no span exporter 'nosuch' is installed; "
                    "installed: console, none"], out
