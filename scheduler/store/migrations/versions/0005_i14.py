"""Pull-forward floor, run counts, jobs by user, paused buckets.

- ``early_at``: the earliest time the idle pull-forward may dispatch a
  scheduled row (its floor). Added with a constant default (the epoch: no
  floor, as seeded rows have), so PostgreSQL adds it without rewriting the
  table (11+ keeps the default in the catalogue).
- ``runs``: runs that rescheduled the job (``recur jobs show``); constant
  default 0, no rewrite either.
- ``ix_due_jobs_early`` (bucket, early_at, due_at) for scheduled rows: the
  pull-forward claim reads one index range of rows whose floor has passed.
- ``ix_due_jobs_user`` (the message's user id, job key): ``recur jobs list
  --user`` and ``recur jobs cancel --user`` read one user's rows. An
  expression index on ``args``: no column is added to the rows and the seed
  loader's columns stay as they are.
- ``bucket_pauses``: buckets the scheduler does not dispatch.

Both indexes are built here, which on a large PostgreSQL table takes a while
and blocks writes meanwhile (docs/scheduler.md gives the figures). On a live
store, build them first with ``CREATE INDEX CONCURRENTLY`` and the same
definition (``USER_SQL`` below): this migration skips an index that exists.

Revision ID: 0005_i14
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_i14"
down_revision = "0004"
branch_labels = None
depends_on = None

#: The user id of a row's message, from its ``args`` (compact ``[user_id, payload]``
#: form, or the message first argument / ``message`` keyword of the full form).
#: scheduler/schema.py holds the same text: a query must repeat it exactly.
USER_SQL = {
    "postgresql": ("(CASE WHEN left(args, 1) = '[' THEN args::json ->> 0 ELSE "
                   "coalesce(args::json #>> '{args,0,user_id}', "
                   "args::json #>> '{kwargs,message,user_id}') END)"),
    "sqlite": ("(CASE WHEN substr(args, 1, 1) = '[' THEN json_extract(args, '$[0]') ELSE "
               "coalesce(json_extract(args, '$.args[0].user_id'), "
               "json_extract(args, '$.kwargs.message.user_id')) END)"),
}
NO_FLOOR = {"postgresql": "'1970-01-01 00:00:00+00'", "sqlite": "'1970-01-01 00:00:00.000000'"}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("due_jobs", sa.Column("early_at", sa.DateTime(timezone=True), nullable=False,
                                        server_default=sa.text(NO_FLOOR[dialect])))
    op.add_column("due_jobs", sa.Column("runs", sa.Integer(), nullable=False,
                                        server_default=sa.text("0")))
    op.execute("CREATE INDEX IF NOT EXISTS ix_due_jobs_early ON due_jobs "
               "(bucket, early_at, due_at) WHERE state = 0")
    op.execute(f"CREATE INDEX IF NOT EXISTS ix_due_jobs_user ON due_jobs "
               f"({USER_SQL[dialect]}, job_key)")
    op.create_table(
        "bucket_pauses",
        sa.Column("bucket", sa.Text(), primary_key=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("bucket_pauses")
    op.execute("DROP INDEX IF EXISTS ix_due_jobs_user")
    op.execute("DROP INDEX IF EXISTS ix_due_jobs_early")
    op.drop_column("due_jobs", "runs")  # SQLite >= 3.35 drops columns in place
    op.drop_column("due_jobs", "early_at")
