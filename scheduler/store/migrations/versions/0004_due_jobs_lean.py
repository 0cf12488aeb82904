"""due_jobs, leaner: task names by code, one time column, no nullable column.

At tens of millions of rows the table is the store's cost, so each row drops
what it does not need:

- ``task`` (the 22-byte name in every row) becomes ``task_id``, a smallint
  code into the new ``due_tasks`` table;
- ``lease_until`` goes: a dispatched row's ``due_at`` is its lease expiry
  (the time the scheduler acts on it next, like a queue's visibility
  timeout). With no nullable column left, PostgreSQL rows carry no null
  bitmap, which with eleven columns cost 8 bytes of header per row;
- ``token`` becomes integer and ``attempts`` smallint.

The table is rewritten in one transaction on both databases (PostgreSQL:
fixed-width columns first so nothing is padded, rows copied in key order,
primary key built after the copy). A dispatched row keeps its lease expiry
as ``due_at``; downgrading restores ``lease_until`` from it.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NOW = sa.text("CURRENT_TIMESTAMP")
TIME = sa.DateTime(timezone=True)


def _postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _indexes(leased_on: str) -> None:
    op.create_index("ix_due_jobs_scheduled", "due_jobs", ["bucket", "due_at"],
                    postgresql_where=sa.text("state = 0"), sqlite_where=sa.text("state = 0"))
    op.create_index("ix_due_jobs_leased", "due_jobs", [leased_on],
                    postgresql_where=sa.text("state = 1"), sqlite_where=sa.text("state = 1"))


def _swap(columns: list[sa.Column[object]], select: str) -> None:
    """Replace due_jobs by a table of ``columns`` filled by ``select`` (in key order)."""
    pg = _postgres()
    key = [] if pg else [sa.PrimaryKeyConstraint("job_key")]
    op.create_table("due_jobs_new", *columns, *key)
    names = ", ".join(c.name for c in columns)
    op.execute(f"INSERT INTO due_jobs_new ({names}) {select} ORDER BY j.job_key")
    op.drop_table("due_jobs")
    op.rename_table("due_jobs_new", "due_jobs")
    if pg:
        op.execute("ALTER TABLE due_jobs ADD CONSTRAINT due_jobs_pkey PRIMARY KEY (job_key)")


def upgrade() -> None:
    op.create_table(
        "due_tasks",
        sa.Column("code", sa.SmallInteger().with_variant(sa.Integer(), "sqlite"),
                  sa.Identity(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False, unique=True),
    )
    op.execute("INSERT INTO due_tasks (name) SELECT DISTINCT task FROM due_jobs ORDER BY task")
    _swap([
        sa.Column("due_at", TIME, nullable=False),
        sa.Column("created_at", TIME, nullable=False, server_default=NOW),
        sa.Column("updated_at", TIME, nullable=False, server_default=NOW),
        sa.Column("token", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("attempts", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("state", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("task_id", sa.SmallInteger(), nullable=False),
        sa.Column("job_key", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
    ], "SELECT CASE WHEN j.state = 1 AND j.lease_until IS NOT NULL THEN j.lease_until "
       "ELSE j.due_at END, j.created_at, j.updated_at, j.token, j.attempts, j.state, t.code, "
       "j.job_key, j.bucket, j.args FROM due_jobs j JOIN due_tasks t ON t.name = j.task")
    _indexes("due_at")
    if _postgres():
        op.execute("ANALYZE due_jobs")


def downgrade() -> None:
    _swap([
        sa.Column("due_at", TIME, nullable=False),
        sa.Column("lease_until", TIME, nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", TIME, nullable=False, server_default=NOW),
        sa.Column("updated_at", TIME, nullable=False, server_default=NOW),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("state", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("job_key", sa.Text(), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
    ], "SELECT j.due_at, CASE WHEN j.state = 1 THEN j.due_at END, j.token, j.created_at, "
       "j.updated_at, j.attempts, j.state, j.job_key, t.name, j.bucket, j.args "
       "FROM due_jobs j JOIN due_tasks t ON t.code = j.task_id")
    _indexes("lease_until")
    op.drop_table("due_tasks")
