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
from alembic.util import CommandError
from sqlalchemy import Engine

from config.errors import InvalidArgument
from scheduler.store.bulk_indexes import build_missing
from scheduler.store.connection import translated
from scheduler.store.schema_check import (
    MIGRATIONS,
    VERSION_TABLE,
    check_schema,
    current_revision,
    file_refusals,
    head_revision,
    missing_sqlite_file,
    sqlite_path_problem,
    sqlite_unwritable,
    unknown_revision,
)

__all__ = ["MIGRATIONS", "VERSION_TABLE", "alembic_config", "alembic_head", "check_schema",
           "current_revision", "head_revision", "missing_sqlite_file", "sqlite_path_problem",
           "sqlite_unwritable", "upgrade"]


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def alembic_head() -> str | None:
    """The newest migration as alembic reads it (head_revision's answer must match)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Migrate the database to ``revision``; return the revision it is at now. A revision
    that names no migration is :class:`InvalidArgument` before anything is opened."""
    cfg = alembic_config()
    _check_revision(cfg, revision)
    if (refused := sqlite_path_problem(engine)) is not None:  # a directory, none to make it in
        raise refused
    with file_refusals(engine):  # not a database, corrupt, read-only: say so, not SQLite
        have = current_revision(engine)  # a search_path naming no usable schema: say so
        if (newer := unknown_revision(engine.url, have)) is not None:  # not alembic's trace
            raise newer
        with translated(f"due-jobs database {engine.url!r}"), engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    if revision == "head":  # indexes a stopped seed left unbuilt (bulk_indexes.py)
        build_missing(engine)
    return current_revision(engine) or ""


def _check_revision(cfg: Config, revision: str) -> None:
    """``head`` or one migration's id (or a unique prefix of one), as alembic resolves it."""
    problem = None
    if not revision.strip() or revision != revision.strip():
        problem = "is empty or padded with spaces"
    elif "+" in revision or "-" in revision:  # alembic's relative steps: +1, head-2
        problem = "relative revisions are not taken, name one"
    else:
        try:
            found = ScriptDirectory.from_config(cfg).get_revisions(revision)
        except CommandError as exc:
            problem = " ".join(str(exc).split())[:200]
        else:
            if not found:
                problem = "names no migration"
    if problem:
        raise InvalidArgument(f"--revision {revision[:70]!r}: {problem} (give head or one of "
                              f"{', '.join(_ids(cfg))})")


def _ids(cfg: Config) -> list[str]:
    return [script.revision for script in ScriptDirectory.from_config(cfg).walk_revisions()][::-1]
