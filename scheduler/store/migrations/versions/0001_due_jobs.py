"""due_jobs and due_counters tables with their drain and lease indexes.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NOW = sa.text("CURRENT_TIMESTAMP")


def upgrade() -> None:
    op.create_table(
        "due_jobs",
        sa.Column("job_key", sa.Text(), primary_key=True),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_index("ix_due_jobs_scheduled", "due_jobs", ["bucket", "due_at"],
                    postgresql_where=sa.text("state = 0"), sqlite_where=sa.text("state = 0"))
    op.create_index("ix_due_jobs_leased", "due_jobs", ["lease_until"],
                    postgresql_where=sa.text("state = 1"), sqlite_where=sa.text("state = 1"))
    op.create_table(
        "due_counters",
        sa.Column("bucket", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("bucket", "name"),
    )


def downgrade() -> None:
    op.drop_table("due_counters")
    op.drop_index("ix_due_jobs_leased", table_name="due_jobs")
    op.drop_index("ix_due_jobs_scheduled", table_name="due_jobs")
    op.drop_table("due_jobs")
