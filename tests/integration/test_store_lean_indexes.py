"""Migration 0008 (#26): the user index on the user alone (deduplicated), the drain and
pull-forward indexes packed; the seed's deferred indexes and their recovery."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from config.errors import SchemaOutOfDate
from scheduler.store.bulk_indexes import build_indexes, build_missing, defer_indexes
from scheduler.store.connection import make_engine
from scheduler.store.migrate import check_schema, upgrade
from scheduler.store.operator_queries import user_keys, user_of
from scheduler.store.schema import secondary_indexes
from tests.integration.test_store_migration_fair_share import downgrade, predicates
from tests.integration.test_store_migrations import scratch_pg  # noqa: F401 - a fixture

USERS = 200


def fill(url: str, rows: int) -> None:
    """``rows`` jobs of USERS users, in the stored array form; analyzed."""
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) "
                          "SELECT 'k' || i, 1, 'short', '[\"u-' || (i % :users) || '\",null]', "
                          "now() + i * interval '1 second' FROM generate_series(1, :rows) i"),
                     {"users": USERS, "rows": rows})
        conn.execute(text("ANALYZE due_jobs"))
    engine.dispose()


def test_0008_rebuilds_three_indexes_and_downgrades_back(scratch_pg: str) -> None:  # noqa: F811
    engine = make_engine(scratch_pg)
    assert upgrade(engine, "0007_fair_share") == "0007_fair_share"
    old = predicates(engine)
    assert old["ix_due_jobs_user"].endswith(", job_key)")
    fill(scratch_pg, 1000)
    assert upgrade(engine) == "0008_lean_indexes"
    new = predicates(engine)
    assert not new["ix_due_jobs_user"].endswith(", job_key)")
    for name in ("ix_due_jobs_scheduled", "ix_due_jobs_early"):
        assert "fillfactor='100'" in new[name], new[name]
    assert set(new) == set(old)
    downgrade(engine, "0007_fair_share")
    assert predicates(engine) == old
    assert upgrade(engine) == "0008_lean_indexes"
    assert predicates(engine) == new
    engine.dispose()


def test_a_users_keys_are_read_through_the_user_index(scratch_pg: str) -> None:  # noqa: F811
    engine = make_engine(scratch_pg)
    upgrade(engine)
    fill(scratch_pg, 20_000)
    query = user_keys(user_of("postgresql"), "u-7", "", 50)
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        plan = "\n".join(conn.execute(text("EXPLAIN " + sql)).scalars())
        keys = list(conn.execute(query).scalars())
    assert "ix_due_jobs_user" in plan, plan
    assert keys == sorted(f"k{i}" for i in range(7, 20_001, USERS))[:50]
    engine.dispose()


def test_the_seed_defers_indexes_only_on_an_empty_store(scratch_pg: str) -> None:  # noqa: F811
    engine = make_engine(scratch_pg)
    upgrade(engine)
    built = predicates(engine)
    assert set(secondary_indexes()) < set(built)
    assert sorted(defer_indexes(scratch_pg)) == sorted(secondary_indexes())
    assert set(predicates(engine)) == {"due_jobs_pkey"}
    # A seed stopped here: every process refuses the store, naming the command that
    # builds the indexes again; that command does, as they were.
    with pytest.raises(SchemaOutOfDate, match=r"ix_due_jobs_user.*recur db upgrade"):
        check_schema(engine)
    assert upgrade(engine) == "0008_lean_indexes"
    assert predicates(engine) == built
    check_schema(engine)
    fill(scratch_pg, 10)
    assert defer_indexes(scratch_pg) == []
    assert build_indexes(scratch_pg) == []
    assert predicates(engine) == built
    engine.dispose()


def test_the_indexes_are_built_at_once_biggest_first_and_valid(scratch_pg: str) -> None:  # noqa: F811
    engine = make_engine(scratch_pg)
    upgrade(engine)
    built = predicates(engine)
    defer_indexes(scratch_pg)
    fill(scratch_pg, 2000)
    assert sorted(build_indexes(scratch_pg)) == sorted(secondary_indexes())  # one per core
    assert predicates(engine) == built
    defer_indexes(scratch_pg)  # not empty: kept
    with engine.begin() as conn:
        for name in secondary_indexes():
            conn.execute(text(f"DROP INDEX {name}"))
    # On one connection the order shows: the three big ones first, biggest first.
    order = build_missing(engine, connections=1)
    assert order[:3] == ["ix_due_jobs_user", "ix_due_jobs_early", "ix_due_jobs_scheduled"]
    assert sorted(order) == sorted(secondary_indexes())
    with engine.connect() as conn:
        valid = set(conn.execute(text(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'due_jobs'::regclass AND i.indisvalid")).scalars())
    assert valid == {"due_jobs_pkey", *secondary_indexes()}
    check_schema(engine)
    engine.dispose()
    check_schema(engine)
    engine.dispose()
