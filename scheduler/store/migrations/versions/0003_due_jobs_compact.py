"""due_jobs on PostgreSQL: columns in an order that needs no alignment padding.

PostgreSQL aligns 8-byte values (timestamps, bigint) to 8 bytes within a row;
in the first layout each of due_at, token and created_at followed a shorter
column and paid up to 7 bytes of padding. Fixed 8-byte columns now come first,
then the 4- and 2-byte ones, then the texts (which need no alignment). Column
names and meanings are unchanged (the Spark seed loader writes them by name).
The table is rewritten (one transaction); SQLite, which does not pad, is left
as it is.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: Every column, in the padding-free order.
COLUMNS = ("due_at", "lease_until", "token", "created_at", "updated_at", "attempts", "state",
           "job_key", "task", "bucket", "args")
OLD_ORDER = ("job_key", "task", "bucket", "args", "due_at", "state", "lease_until", "token",
             "attempts", "created_at", "updated_at")

CREATE = """
CREATE TABLE due_jobs_new (
    due_at      timestamptz NOT NULL,
    lease_until timestamptz NULL,
    token       bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    attempts    integer NOT NULL DEFAULT 0,
    state       smallint NOT NULL DEFAULT 0,
    job_key     text NOT NULL,
    task        text NOT NULL,
    bucket      text NOT NULL,
    args        text NOT NULL
)
"""


def _rebuild(create: str, columns: tuple[str, ...]) -> None:
    names = ", ".join(columns)
    op.execute(create)
    op.execute(f"INSERT INTO due_jobs_new ({names}) SELECT {names} FROM due_jobs")
    op.execute("DROP TABLE due_jobs")
    op.execute("ALTER TABLE due_jobs_new RENAME TO due_jobs")
    op.execute("ALTER TABLE due_jobs ADD CONSTRAINT due_jobs_pkey PRIMARY KEY (job_key)")
    op.execute("CREATE INDEX ix_due_jobs_scheduled ON due_jobs (bucket, due_at) "
               "WHERE state = 0")
    op.execute("CREATE INDEX ix_due_jobs_leased ON due_jobs (lease_until) WHERE state = 1")
    op.execute("ANALYZE due_jobs")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _rebuild(CREATE, COLUMNS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    old = ",\n".join(
        next(line.strip() for line in CREATE.splitlines() if line.strip().startswith(name + " "))
        .rstrip(",") for name in OLD_ORDER)
    _rebuild(f"CREATE TABLE due_jobs_new (\n{old}\n)", OLD_ORDER)
