"""Rows the scheduler sets aside: state 2 and ``due_set_aside``.

A row whose message the broker cannot take (too large, a bucket that left the
bucket file, a call that cannot be decoded) is set aside instead of being
claimed again every pass: its state becomes 2, which no index covers (they are
partial on states 0 and 1, so every claim, recovery and drain statement keeps
its meaning), and ``due_set_aside`` holds why and when, by bucket. A table of
its own: the rows of the population carry no extra column. Nothing is
rewritten; creating an empty table is instant at any size.

Downgrading puts set-aside rows back to scheduled (the code before this
revision knows no state 2) and drops the table.

Revision ID: 0006_set_aside
Revises: 0005_i14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_set_aside"
down_revision = "0005_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "due_set_aside",
        sa.Column("job_key", sa.Text(), primary_key=True),
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_due_set_aside_bucket", "due_set_aside", ["bucket", "set_at"])


def downgrade() -> None:
    op.execute("UPDATE due_jobs SET state = 0 WHERE state = 2")
    op.drop_index("ix_due_set_aside_bucket", table_name="due_set_aside")
    op.drop_table("due_set_aside")
