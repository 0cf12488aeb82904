"""Hostile periodic entries: refused at start by name, or, left in the store by another
writer, skipped without stopping the others."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from scheduler.periodic import PeriodicEntry
from scheduler.store import DueStore
from scheduler.store.schema import periodic_entries
from tests.support import services
from tests.support.processes import recur_argv
from tests.support.refusals import refusal_line, service_environment

T0 = datetime(2030, 1, 1, tzinfo=UTC)
GOOD_ARGS = '{"args":[],"kwargs":{}}'
#: Rows another writer or version could leave: schedules and calls this one cannot use.
GARBAGE = {"nan": ("every nan", GOOD_ARGS), "zero": ("every 0", GOOD_ARGS),
           "negative": ("every -5", GOOD_ARGS), "huge": ("every 1e300", GOOD_ARGS),
           "feb-31": ("cron 0 0 31 2 *", GOOD_ARGS), "words": ("sometimes", GOOD_ARGS),
           "short-cron": ("cron 0 0", GOOD_ARGS), "bad-args": ("every 60.0", "not json{")}


def test_garbage_rows_in_the_store_are_skipped_and_the_good_entry_fires(
        store_url: str) -> None:
    store = DueStore.open(store_url)
    store.sync_periodic([PeriodicEntry("good", "tasks.process_message", "short", GOOD_ARGS,
                                       "every 60.0")], T0)
    with store.engine.begin() as conn:
        conn.execute(insert(periodic_entries), [
            {"name": name, "task": "tasks.process_message", "bucket": "short", "args": args,
             "schedule": schedule, "next_run_at": T0}
            for name, (schedule, args) in GARBAGE.items()])
    assert store.fire_periodic(T0 + timedelta(seconds=61)) == ["good"]
    assert store.fire_periodic(T0 + timedelta(seconds=62)) == []  # nothing twice, no loop
    assert store.fire_periodic(T0 + timedelta(seconds=121)) == ["good"]
    got: list = []
    store.dispatch("short", 100, T0 + timedelta(seconds=121), T0 + timedelta(seconds=181),
                   got.extend)
    assert sorted(c.job_key for c in got) == [
        f"periodic:good:{(T0 + timedelta(seconds=s)).isoformat()}" for s in (60, 121)]
    with store.engine.connect() as conn:  # left as they are, for the writer that knows them
        left = {r.name: r.schedule for r in conn.execute(periodic_entries.select())}
    assert left == {"good": "every 60.0", **{n: s for n, (s, _) in GARBAGE.items()}}
    store.close()


BAD_ENTRIES = {
    "zero": '{"task": "tasks.process_message", "schedule": 0, "args": [MSG]}',
    "unregistered": '{"task": "no.such.task", "schedule": 5, "args": [MSG]}',
    "options": '{"task": "tasks.process_message", "schedule": 5, "args": [MSG],'
               ' "options": {"queue": "elsewhere"}}',
}


def test_scheduler_start_refuses_a_bad_beat_entry_in_one_line_naming_it(
        fresh_pg_url: str, tmp_path: Path) -> None:
    for name, entry in BAD_ENTRIES.items():
        module = f"beat_{name}"
        (tmp_path / f"{module}.py").write_text(
            "from tasks.app import app\n"
            "MSG = {'id': 'm', 'user_id': 'u', 'bucket': 'short', 'payload': None}\n"
            f"app.conf.beat_schedule = {{{name!r}: {entry}}}\n")
        env = service_environment(RECUR_DATABASE_URL=fresh_pg_url, RECUR_IMPORTS=module,
                                  PYTHONPATH=os.pathsep.join([str(tmp_path),
                                                              str(services.ROOT)]))
        done = subprocess.run(recur_argv("scheduler"), env=env, capture_output=True,
                              text=True, timeout=60, cwd=services.ROOT)
        assert refusal_line(done).startswith(f"recur: beat_schedule entry {name!r}")
