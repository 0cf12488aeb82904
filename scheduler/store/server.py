"""What ``recur doctor`` reads of the PostgreSQL server behind the store: its settings,
and the storage options of recur's tables (autovacuum switched off for one)."""

from __future__ import annotations

from sqlalchemy import Connection, text

from scheduler.store.schema import metadata
from scheduler.store.text_queries import SHOW_SETTING, TABLE_OPTIONS


def server_setting(conn: Connection, name: str) -> str:
    """The server setting ``name`` (one of ours, never input) as this role sees it."""
    return str(conn.execute(text(SHOW_SETTING.format(name=name))).scalar())


def table_options(conn: Connection) -> list[tuple[str, list[str] | None]]:
    """Each of recur's tables in the current schema with its storage options."""
    rows = conn.execute(text(TABLE_OPTIONS), {"names": list(metadata.tables)}).all()
    return [(str(name), options) for name, options in rows]
