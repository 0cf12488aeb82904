"""Migration 0007 (fair share): a column with a constant default (no rewrite), the drain
index rebuilt on rows not dealt, two indexes of dealt rows; a prebuilt drain index is
swapped in by name; downgrading puts dealt rows back in due order. Both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text

from scheduler.store.connection import make_engine
from scheduler.store.migrate import alembic_config, upgrade
from tests.integration.test_store_migrations import scratch_pg  # noqa: F401 - a fixture

DUE = datetime(2030, 1, 1, tzinfo=UTC)
INDEXES = {"ix_due_jobs_scheduled", "ix_due_jobs_dealt", "ix_due_jobs_dealt_due"}


def url_of(db: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (f"sqlite:///{tmp_path / 'due.sqlite3'}" if db == "sqlite"
            else str(request.getfixturevalue("scratch_pg")))


def predicates(engine: Engine) -> dict[str, str]:
    """Index name -> its definition (PostgreSQL) or CREATE statement (SQLite)."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE "
                                     "tablename = 'due_jobs' AND schemaname = current_schema()"))
        else:
            rows = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                                     "AND tbl_name = 'due_jobs' AND sql IS NOT NULL"))
        return {str(n): str(d) for n, d in rows}


def downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0007_adds_turn_without_a_rewrite_and_downgrades_back(
        db: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    engine = make_engine(url_of(db, request, tmp_path))
    assert upgrade(engine, "0006_set_aside") == "0006_set_aside"
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) "
                          "VALUES ('k', 1, 'short', '[\"u\",null]', :due)"), {"due": DUE})
    relfile = "SELECT pg_relation_filenode('due_jobs')"
    before = None
    if db == "postgresql":
        with engine.connect() as conn:
            before = conn.execute(text(relfile)).scalar()
    assert upgrade(engine, "0007_fair_share") == "0007_fair_share"
    found = predicates(engine)
    assert found.keys() >= INDEXES
    assert "turn = 0" in found["ix_due_jobs_scheduled"]
    assert "turn <> 0" in found["ix_due_jobs_dealt"] and "turn <> 0" in found[
        "ix_due_jobs_dealt_due"]
    with engine.begin() as conn:
        assert conn.execute(text("SELECT turn FROM due_jobs")).scalar() == 0
        if db == "postgresql":  # a constant default: the table's file is the same
            assert conn.execute(text(relfile)).scalar() == before
        conn.execute(text("UPDATE due_jobs SET turn = 3"))  # dealt back
    downgrade(engine, "0006_set_aside")
    assert "turn" not in {c["name"] for c in inspect(engine).get_columns("due_jobs")}
    found = predicates(engine)
    assert "ix_due_jobs_dealt" not in found and "turn" not in found["ix_due_jobs_scheduled"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM due_jobs WHERE state = 0")).scalar() == 1
    engine.dispose()


def test_0007_swaps_in_a_drain_index_built_concurrently(scratch_pg: str) -> None:  # noqa: F811
    engine = make_engine(scratch_pg)
    upgrade(engine, "0006_set_aside")
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    with autocommit.connect() as conn:
        conn.execute(text("ALTER TABLE due_jobs ADD COLUMN IF NOT EXISTS turn integer NOT NULL "
                          "DEFAULT 0"))
        conn.execute(text("CREATE INDEX CONCURRENTLY ix_due_jobs_scheduled_0007 ON due_jobs "
                          "(bucket, due_at) WHERE state = 0 AND turn = 0"))
    assert upgrade(engine, "0007_fair_share") == "0007_fair_share"
    found = predicates(engine)
    assert "ix_due_jobs_scheduled_0007" not in found
    assert "turn = 0" in found["ix_due_jobs_scheduled"]
    engine.dispose()
