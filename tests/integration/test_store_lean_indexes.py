"""Migration 0008 (#26): the user index on the user alone (deduplicated), the drain and
pull-forward indexes packed; the seed's deferred indexes and their recovery."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import Engine, text

from config.errors import SchemaOutOfDate, StoreError, StoreUnavailable
from scheduler.store.bulk_indexes import build_indexes, build_missing, defer_indexes
from scheduler.store.connection import make_engine
from scheduler.store.migrate import check_schema, head_revision, upgrade
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
    assert upgrade(engine, "0008_lean_indexes") == "0008_lean_indexes"
    new = predicates(engine)
    assert not new["ix_due_jobs_user"].endswith(", job_key)")
    for name in ("ix_due_jobs_scheduled", "ix_due_jobs_early"):
        assert "fillfactor='100'" in new[name], new[name]
    assert set(new) == set(old)
    downgrade(engine, "0007_fair_share")
    assert predicates(engine) == old
    assert upgrade(engine, "0008_lean_indexes") == "0008_lean_indexes"
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
    assert upgrade(engine) == head_revision()
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


#: The order the build connections take the indexes in after the user index (biggest
#: first, then as secondary_indexes() lists them).
AFTER_USER = ["ix_due_jobs_early", "ix_due_jobs_scheduled", "ix_due_jobs_dealt",
              "ix_due_jobs_dealt_due", "ix_due_jobs_leased"]
_NAMED = re.compile(r": building index (\w+) failed \(still missing: ([\w, ]+)\): ")


def named(error: StoreError) -> tuple[str, list[str]]:
    """The index whose build failed and those still missing, as ``error`` names them."""
    message = str(error)
    assert "\n" not in message, message
    found = _NAMED.search(message)
    assert found is not None, message
    return found[1], found[2].split(", ")


def sqlstate(error: BaseException) -> str:
    """The SQLSTATE of the driver error ``error`` was raised from."""
    cause = error.__cause__
    return str(getattr(getattr(cause, "orig", cause), "sqlstate", ""))


def loaded_without_indexes(url: str, rows: int) -> tuple[Engine, dict[str, str]]:
    """A migrated store whose secondary indexes a seed deferred, ``rows`` loaded into it;
    its engine and the indexes as the migrations build them."""
    engine = make_engine(url)
    upgrade(engine)
    built = predicates(engine)
    assert sorted(defer_indexes(url)) == sorted(secondary_indexes())
    fill(url, rows)
    return engine, built


def test_a_failed_build_is_one_error_naming_what_is_still_missing(
        scratch_pg: str) -> None:  # noqa: F811
    engine, built = loaded_without_indexes(scratch_pg, 2000)
    with engine.begin() as conn:  # args the user index cannot parse, loaded without it
        conn.execute(text("INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) "
                          "VALUES ('bad', 1, 'short', '[not json', now())"))
    with pytest.raises(StoreError) as failed:
        build_missing(engine, connections=2)  # two at once, whatever the cores
    # A statement failed on a working database: StoreError, not StoreUnavailable.
    assert type(failed.value) is StoreError and sqlstate(failed.value) == "22P02"
    failing, unbuilt = named(failed.value)
    assert failing == "ix_due_jobs_user" and failing in unbuilt
    # The other connection went on biggest first and took nothing new once the user
    # index failed (how far it got depends on timing): what it built is whole and
    # committed, a prefix of its order, and exactly what the error does not name.
    done = [name for name in AFTER_USER if name not in unbuilt]
    assert done == AFTER_USER[:len(done)], unbuilt
    assert sorted(unbuilt + done) == sorted(secondary_indexes())
    assert set(predicates(engine)) == set(built) - set(unbuilt)
    # Every process refuses the store, naming each index still missing, until the
    # command it names builds them.
    with pytest.raises(SchemaOutOfDate, match="recur db upgrade") as refused:
        check_schema(engine)
    assert all(name in str(refused.value) for name in unbuilt), refused.value
    # The next seed into the emptied store recovers it as it was. Not a DELETE of the
    # bad row: CREATE INDEX still reads a deleted row while any older snapshot in the
    # cluster may see it (another test's, beside this one), and fails on it again.
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE due_jobs"))
    assert sorted(defer_indexes(scratch_pg) + unbuilt) == sorted(secondary_indexes())
    fill(scratch_pg, 2000)
    assert sorted(build_indexes(scratch_pg)) == sorted(secondary_indexes())
    assert predicates(engine) == built
    check_schema(engine)
    engine.dispose()


def test_a_build_that_times_out_on_a_lock_names_what_is_still_missing(
        scratch_pg: str) -> None:  # noqa: F811
    engine, built = loaded_without_indexes(scratch_pg, 100)
    impatient = f"{scratch_pg}%20-clock_timeout%3D200"  # as a role's lock_timeout would
    with engine.begin() as writer:  # a writer holds the table all through the build
        writer.execute(text("LOCK TABLE due_jobs IN ROW EXCLUSIVE MODE"))
        with pytest.raises(StoreUnavailable) as failed:
            build_indexes(impatient)
    # Translated as the store translates a timeout, and still naming every index missing.
    assert sqlstate(failed.value) == "55P03"
    failing, unbuilt = named(failed.value)
    assert failing in ("ix_due_jobs_user", "ix_due_jobs_early")  # the first ones taken
    assert sorted(unbuilt) == sorted(secondary_indexes())
    assert set(predicates(engine)) == {"due_jobs_pkey"}
    assert upgrade(engine) == head_revision()
    assert predicates(engine) == built
    check_schema(engine)
    engine.dispose()
