"""Leaner indexes on due_jobs (#26): a waiting job's bytes, and the seed's speed.

- ``ix_due_jobs_user`` (PostgreSQL): on the user id alone, no longer
  (user id, job key). Every key of one user is then equal, so B-tree
  deduplication (PostgreSQL 13+) stores each user's id once per page with a
  list of 6-byte row pointers: ~10 bytes a row at 10 rows a user, ~7 at 100,
  instead of ~68 (a 36-character UUID and the job key in every entry). A
  user's rows in key order (``recur jobs list --user``, ``cancel``/``move
  --user``) are read through the index and sorted: cheap for the hundreds of
  rows a user has. SQLite keeps (user id, job key): it has no deduplication.
- ``ix_due_jobs_scheduled`` and ``ix_due_jobs_early``: ``fillfactor = 100``.
  Their new entries go to the end of a bucket's range (later due times,
  newer floors), where a split leaves half a page free anyway; a build (this
  migration, the seed's rebuild) packs their pages instead of leaving 10 %
  of each empty.

The two are built again here, which on a large table takes a while and
blocks writes meanwhile (~3-5 s per million rows on two cores). On a live
store build each first with ``CREATE INDEX CONCURRENTLY <name>_0008`` and
the definition of ``scheduler.store.schema.secondary_indexes``: this
migration then swaps it in by name.

Revision ID: 0008_lean_indexes
Revises: 0007_fair_share
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_lean_indexes"
down_revision = "0007_fair_share"
branch_labels = None
depends_on = None

USER_PG = ("(CASE WHEN left(args, 1) = '[' THEN args::json ->> 0 ELSE "
           "coalesce(args::json #>> '{args,0,user_id}', "
           "args::json #>> '{kwargs,message,user_id}') END)")
NEW = {
    "ix_due_jobs_user": f"({USER_PG})",
    "ix_due_jobs_scheduled": "(bucket, due_at) WITH (fillfactor = 100) "
                             "WHERE state = 0 AND turn = 0",
    "ix_due_jobs_early": "(bucket, early_at, due_at) WITH (fillfactor = 100) WHERE state = 0",
}
OLD = {
    "ix_due_jobs_user": f"({USER_PG}, job_key)",
    "ix_due_jobs_scheduled": "(bucket, due_at) WHERE state = 0 AND turn = 0",
    "ix_due_jobs_early": "(bucket, early_at, due_at) WHERE state = 0",
}


def _has_index(name: str) -> bool:
    return name in {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("due_jobs")}


def _replace(definitions: dict[str, str]) -> None:
    for name, definition in definitions.items():
        prebuilt = f"{name}_0008"
        op.execute(f"DROP INDEX IF EXISTS {name}")
        if _has_index(prebuilt):
            op.execute(f"ALTER INDEX {prebuilt} RENAME TO {name}")
        else:
            op.execute(f"CREATE INDEX {name} ON due_jobs {definition}")
    # The planner's statistics of the user id expression belong to its index: without
    # them it guesses 0.5 % of the table per user and walks the primary key instead.
    op.execute("ANALYZE due_jobs")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _replace(NEW)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _replace(OLD)
