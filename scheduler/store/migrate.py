"""Schema migrations (alembic): ``recur db upgrade`` creates and upgrades the tables.

Nothing creates tables at run time; processes check that the schema is at the
newest revision and refuse to start otherwise, naming the command to run. That
check (scheduler/store/schema_check.py) needs no alembic, so only what migrates
imports this module.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from scheduler.store.bulk_indexes import build_missing
from scheduler.store.connection import translated
from scheduler.store.schema_check import (
    MIGRATIONS,
    VERSION_TABLE,
    check_schema,
    current_revision,
    head_revision,
    missing_sqlite_file,
)

__all__ = ["MIGRATIONS", "VERSION_TABLE", "alembic_config", "alembic_head", "check_schema",
           "current_revision", "head_revision", "missing_sqlite_file", "upgrade"]


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def alembic_head() -> str | None:
    """The newest migration as alembic reads it (head_revision's answer must match)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Migrate the database to ``revision``; return the revision it is at now."""
    cfg = alembic_config()
    with translated(f"due-jobs database {engine.url!r}"), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    if revision == "head":  # indexes a stopped seed left unbuilt (bulk_indexes.py)
        build_missing(engine)
    return current_revision(engine) or ""
