"""Alembic environment: migrations run on the connection ``scheduler.store.migrate`` hands in."""

from __future__ import annotations

from alembic import context

from scheduler.store.migrate import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
