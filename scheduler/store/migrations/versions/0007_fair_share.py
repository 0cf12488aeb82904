"""Fair share between users: the ``turn`` column and the indexes of dealt rows.

- ``turn``: 0, or the round a scheduled row was dealt into while its bucket
  was behind (scheduler/fair_share.py). A constant default: PostgreSQL 11+ adds
  it without rewriting the table, and a row written afterwards stores it in the
  alignment padding after ``runs`` (0 bytes on disk).
- ``ix_due_jobs_scheduled`` (the drain index) becomes partial on
  ``state = 0 AND turn = 0``: the claim reads it as before, and a dealt row
  leaves it. It is built again here, which on a large PostgreSQL table takes a
  while and blocks writes meanwhile; on a live store build it first with
  ``CREATE INDEX CONCURRENTLY ix_due_jobs_scheduled_0007 ON due_jobs (bucket,
  due_at) WHERE state = 0 AND turn = 0`` (after ``ALTER TABLE due_jobs ADD
  COLUMN IF NOT EXISTS turn integer NOT NULL DEFAULT 0``, instant): this
  migration then swaps it in by name.
- ``ix_due_jobs_dealt`` (bucket, turn, due_at) and ``ix_due_jobs_dealt_due``
  (bucket, due_at, job_key), both partial on ``state = 0 AND turn <> 0``: only dealt
  rows are in them (none when no bucket is behind), so they cost nothing for
  the population. Created on no rows: instant.

Downgrading puts every dealt row back in due order (the column goes).

Revision ID: 0007_fair_share
Revises: 0006_set_aside
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_fair_share"
down_revision = "0006_set_aside"
branch_labels = None
depends_on = None

UNDEALT = "state = 0 AND turn = 0"
DEALT = "state = 0 AND turn <> 0"
PREBUILT = "ix_due_jobs_scheduled_0007"


def _has_index(name: str) -> bool:
    return name in {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("due_jobs")}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE due_jobs ADD COLUMN IF NOT EXISTS turn integer NOT NULL "
                   "DEFAULT 0")
    else:
        op.add_column("due_jobs", sa.Column("turn", sa.Integer(), nullable=False,
                                            server_default=sa.text("0")))
    if dialect == "postgresql" and _has_index(PREBUILT):
        op.execute("DROP INDEX ix_due_jobs_scheduled")
        op.execute(f"ALTER INDEX {PREBUILT} RENAME TO ix_due_jobs_scheduled")
    else:
        op.execute("DROP INDEX ix_due_jobs_scheduled")
        op.execute(f"CREATE INDEX ix_due_jobs_scheduled ON due_jobs (bucket, due_at) "
                   f"WHERE {UNDEALT}")
    op.execute(f"CREATE INDEX IF NOT EXISTS ix_due_jobs_dealt ON due_jobs "
               f"(bucket, turn, due_at) WHERE {DEALT}")
    op.execute(f"CREATE INDEX IF NOT EXISTS ix_due_jobs_dealt_due ON due_jobs "
               f"(bucket, due_at, job_key) WHERE {DEALT}")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_due_jobs_dealt_due")
    op.execute("DROP INDEX IF EXISTS ix_due_jobs_dealt")
    op.execute("DROP INDEX ix_due_jobs_scheduled")
    op.execute("CREATE INDEX ix_due_jobs_scheduled ON due_jobs (bucket, due_at) "
               "WHERE state = 0")
    op.drop_column("due_jobs", "turn")
