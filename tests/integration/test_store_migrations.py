"""Migrations 0003 (padding-free columns), 0004 (lean rows) and 0005 (pull-forward floor,
job control) keep every row and its meaning."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, text

from scheduler.store import Claimed, DueStore
from scheduler.store.connection import make_engine
from scheduler.store.migrate import alembic_config, head_revision, upgrade

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture
def scratch_pg() -> Iterator[str]:
    """A PostgreSQL schema of its own (migrations are run up and down in it)."""
    schema = f"recur_migr_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG}?options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def columns(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'due_jobs' "
            "AND table_schema = current_schema() ORDER BY ordinal_position")).scalars())


def indexes(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'due_jobs' "
            "AND schemaname = current_schema()")).scalars())


def test_0003_reorders_columns_and_keeps_the_rows(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    assert upgrade(engine, "0002") == "0002"
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_jobs (job_key, task, bucket, args, due_at, token) "
                          "VALUES ('k', 'tasks.process_message', 'short', "
                          "'{\"args\":[1],\"kwargs\":{}}', :due, 4)"), {"due": due})
    assert upgrade(engine, "0003") == "0003"
    assert columns(engine)[:5] == ["due_at", "lease_until", "token", "created_at", "updated_at"]
    assert indexes(engine) == {"due_jobs_pkey", "ix_due_jobs_scheduled", "ix_due_jobs_leased"}
    engine.dispose()


def test_0004_codes_tasks_and_keeps_leases_as_due_times(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    assert upgrade(engine, "0003") == "0003"
    due, lease = datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO due_jobs (job_key, task, bucket, args, due_at, token, state, "
            "lease_until) VALUES ('k', 'tasks.process_message', 'short', '{\"args\":[1]}', "
            ":due, 4, 0, NULL), ('d', 'tests.other', 'long', '{\"args\":[2]}', :due, 7, 1, "
            ":lease)"), {"due": due, "lease": lease})
    assert upgrade(engine, "0004") == "0004"
    assert columns(engine) == ["due_at", "created_at", "updated_at", "token", "attempts",
                               "state", "task_id", "job_key", "bucket", "args"]
    assert indexes(engine) == {"due_jobs_pkey", "ix_due_jobs_scheduled", "ix_due_jobs_leased"}
    assert upgrade(engine) == head_revision()
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT j.job_key, t.name, j.due_at, j.state, j.token FROM due_jobs j "
            "JOIN due_tasks t ON t.code = j.task_id ORDER BY j.job_key")).all()
    assert [tuple(r) for r in rows] == [("d", "tests.other", lease, 1, 7),
                                        ("k", "tasks.process_message", due, 0, 4)]
    engine.dispose()
    store = DueStore.open(scratch_pg)
    got: list[Claimed] = []
    store.dispatch("short", 10, due, due + timedelta(minutes=1), got.extend)
    assert [(c.job_key, c.task, c.token, c.args) for c in got] == [
        ("k", "tasks.process_message", 5, '{"args":[1]}')]
    # The migrated lease still ends when it did: not before, and then it is recovered.
    assert store.recover_expired(due + timedelta(minutes=2), 10) == {"short": 1}
    assert store.recover_expired(lease + timedelta(seconds=1), 10) == {"long": 1}
    store.close()


def test_migrations_downgrade_to_the_first_layout(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    upgrade(engine)
    lease = datetime(2030, 1, 2, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_tasks (name) VALUES ('tests.other')"))
        conn.execute(text(
            "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at, state) SELECT 'd', "
            "code, 'long', '[]', :lease, 1 FROM due_tasks"), {"lease": lease})
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    assert columns(engine)[:4] == ["job_key", "task", "bucket", "args"]
    with engine.connect() as conn:
        row = conn.execute(text("SELECT task, state, lease_until FROM due_jobs")).one()
    assert tuple(row) == ("tests.other", 1, lease)
    assert upgrade(engine) == head_revision()
    engine.dispose()


def test_0004_on_sqlite_keeps_rows_both_ways(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'due.sqlite3'}"
    engine = make_engine(url)
    assert upgrade(engine, "0003") == "0003"
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO due_jobs (job_key, task, bucket, args, due_at, state, lease_until, "
            "token) VALUES ('k', 'tests.other', 'long', '[]', '2030-01-01 00:00:00.000000', 1, "
            "'2030-01-02 00:00:00.000000', 3)"))
    assert upgrade(engine) == head_revision()
    with engine.connect() as conn:
        row = conn.execute(text("SELECT j.job_key, t.name, j.due_at, j.state, j.token "
                                "FROM due_jobs j JOIN due_tasks t ON t.code = j.task_id")).one()
    assert tuple(row) == ("k", "tests.other", "2030-01-02 00:00:00.000000", 1, 3)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    with engine.connect() as conn:
        row = conn.execute(text("SELECT task, lease_until, state FROM due_jobs")).one()
    assert tuple(row) == ("tests.other", "2030-01-02 00:00:00.000000", 1)
    engine.dispose()


def test_0005_adds_its_columns_without_rewriting_the_table(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    assert upgrade(engine, "0004") == "0004"
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_tasks (name) VALUES ('tasks.process_message')"))
        conn.execute(text(
            "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) SELECT 'k', code, "
            "'short', '[\"u1\",null]', :due FROM due_tasks"), {"due": due})
        before = conn.execute(text("SELECT pg_relation_filenode('due_jobs')")).scalar()
    assert upgrade(engine, "0005_i14") == "0005_i14"
    with engine.connect() as conn:
        after = conn.execute(text("SELECT pg_relation_filenode('due_jobs')")).scalar()
        row = conn.execute(text("SELECT early_at, runs FROM due_jobs")).one()
    assert after == before  # no table rewrite: the defaults are constants
    assert tuple(row) == (datetime(1970, 1, 1, tzinfo=UTC), 0)
    assert {"ix_due_jobs_early", "ix_due_jobs_user"} <= indexes(engine)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    assert "early_at" not in columns(engine)
    engine.dispose()
