"""Migration 0003 (padding-free column order) keeps every row and what it means."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, text

from scheduler.engine import make_engine
from scheduler.migrate import alembic_config, head_revision, upgrade
from scheduler.store import Claimed, DueStore

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


def test_0003_reorders_columns_and_keeps_the_rows(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    assert upgrade(engine, "0002") == "0002"
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_jobs (job_key, task, bucket, args, due_at, token) "
                          "VALUES ('k', 'tasks.process_message', 'short', "
                          "'{\"args\":[1],\"kwargs\":{}}', :due, 4)"), {"due": due})
    assert upgrade(engine) == head_revision()
    with engine.connect() as conn:
        indexes = set(conn.execute(text(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'due_jobs' "
            "AND schemaname = current_schema()")).scalars())
    assert columns(engine)[:5] == ["due_at", "lease_until", "token", "created_at", "updated_at"]
    assert indexes == {"due_jobs_pkey", "ix_due_jobs_scheduled", "ix_due_jobs_leased"}
    engine.dispose()
    store = DueStore.open(scratch_pg)
    got: list[Claimed] = []
    store.dispatch("short", 10, due, due + timedelta(minutes=1), got.extend)
    assert [(c.job_key, c.token, c.args) for c in got] == [("k", 5, '{"args":[1],"kwargs":{}}')]
    store.close()


def test_0003_downgrades_to_the_first_layout(scratch_pg: str) -> None:
    engine = make_engine(scratch_pg)
    upgrade(engine)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    assert columns(engine)[:4] == ["job_key", "task", "bucket", "args"]
    assert upgrade(engine) == head_revision()
    engine.dispose()
