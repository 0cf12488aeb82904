"""Migration 0006 (set-aside rows) adds a table and nothing else; downgrading puts
set-aside rows back to scheduled, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from scheduler.refusals import UNDECODABLE, Published, Refusal
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.connection import make_engine
from scheduler.store.migrate import alembic_config, head_revision, upgrade
from tests.integration.test_store_migrations import scratch_pg  # noqa: F401 - a fixture

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def refuse_all(rows: list[Claimed]) -> Published:
    return Published(refused={r.job_key: Refusal(UNDECODABLE, "test") for r in rows})


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0006_sets_aside_and_downgrades_back_to_scheduled(
        db: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = (f"sqlite:///{tmp_path / 'due.sqlite3'}" if db == "sqlite"
           else request.getfixturevalue("scratch_pg"))
    engine = make_engine(url)
    assert upgrade(engine, "0005_i14") == "0005_i14"
    before = set(inspect(engine).get_table_names())
    assert upgrade(engine) == head_revision()
    assert set(inspect(engine).get_table_names()) - before == {"due_set_aside"}
    store = DueStore.open(url)
    store.schedule([Job("k", "tasks.process_message", "short", '{"args":5}', NOW)], NOW)
    assert store.dispatch("short", 10, NOW, NOW + timedelta(minutes=1), refuse_all) == 0
    assert store.stats(NOW)["short"].set_aside == 1
    store.close()
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0005_i14")
    assert "due_set_aside" not in inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT job_key, state FROM due_jobs")).all() == [("k", 0)]
    engine.dispose()
