"""Schema migrations (alembic): ``recur db upgrade`` creates and upgrades the tables.

Nothing creates tables at run time; processes check that the schema is at the
newest revision and refuse to start otherwise, naming the command to run.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from config.errors import SchemaOutOfDate
from scheduler.store.connection import translated

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: Our own version table, so another alembic user of the same database cannot collide.
VERSION_TABLE = "recur_schema_version"


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str:
    """The newest migration this code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, f"no migrations found in {MIGRATIONS}"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None before the first upgrade)."""
    with translated(f"due-jobs database {engine.url!r}"), engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Migrate the database to ``revision``; return the revision it is at now."""
    cfg = alembic_config()
    with translated(f"due-jobs database {engine.url!r}"), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return current_revision(engine) or ""


def missing_sqlite_file(engine: Engine) -> Path | None:
    """The SQLite file ``engine`` would create by connecting (None: exists, or not SQLite)."""
    name = engine.url.database
    if engine.dialect.name != "sqlite" or not name or name == ":memory:" or name.startswith(
            "file:"):
        return None
    path = Path(name)
    return None if path.exists() else path


def check_schema(engine: Engine) -> None:
    """Raise SchemaOutOfDate unless the database is at the newest revision.

    Never creates a database: a SQLite file that does not exist is reported as
    such (connecting would create an empty one in the current directory).
    """
    missing = missing_sqlite_file(engine)
    if missing is not None:
        raise SchemaOutOfDate(f"due-jobs store {engine.url}: {missing.resolve()} does not "
                              f"exist: run `recur db upgrade` to create it")
    have, want = current_revision(engine), head_revision()
    if have != want:
        raise SchemaOutOfDate(f"due-jobs schema of {engine.url!r} is at revision "
                              f"{have or 'none'}, this code needs {want}: run `recur db upgrade`")
