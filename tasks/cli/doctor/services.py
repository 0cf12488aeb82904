"""``recur doctor``'s Redis and database checks (tasks/cli/doctor/command.py prints them).

Redis: reachable, ``maxmemory-policy noeviction`` and ``appendonly yes``
(routing/redis_check.py reads them). The due-jobs database: reachable, the
schema at this code's revision and, on PostgreSQL, ``synchronous_commit`` on and
autovacuum running. Reading never creates anything (no SQLite file).
"""

from __future__ import annotations

from typing import Any

import redis
from sqlalchemy import Connection, Engine

from config.errors import StoreUnavailable, StoreUnusable
from config.redact import masked
from config.settings import Settings
from routing.redis_check import Finding, check_client, findings
from routing.redis_client import ping, refused
from scheduler.store.connection import probe_engine, translated
from scheduler.store.server import server_setting, table_options
from tasks.cli.doctor.check import Check, fail, ok, said, warn

#: Seconds doctor waits for a service before it calls it unreachable.
TIMEOUT = 5


def redis_checks(cfg: Settings) -> list[Check]:
    """Redis answers, and keeps what recur writes."""
    url = masked(cfg.redis_url)
    client = check_client(cfg.redis_url, TIMEOUT)
    try:
        answer, exc = ping(client)
        if exc is not None and answer == "refused":
            return [fail("redis", f"{url} refused recur ({said(exc)}): put its password in "
                                  f"RECUR_REDIS_URL (redis://:<password>@host:6379/0)")]
        if exc is not None:
            return [fail("redis", f"cannot reach {url}: {said(exc)}: start it, or fix "
                                  f"RECUR_REDIS_URL (Redis settings not checked)")]
        return [ok("redis", f"reachable at {url} (Redis {redis_version(client)})"),
                *(redis_setting(cfg, f) for f in findings(client))]
    finally:
        client.close()


def redis_version(client: redis.Redis) -> str:
    """The server's version ("?" where INFO is refused: a managed Redis may)."""
    info, _ = refused(lambda: client.info("server"))
    return str(info.get("redis_version", "?")) if info else "?"


def redis_setting(cfg: Settings, finding: Finding) -> Check:
    """noeviction missing is a FAIL (eviction deletes parked jobs while Redis runs); AOF
    missing is a warn (a restart loses them), a FAIL with RECUR_STRICT=1."""
    name = f"redis {finding.setting.name}"
    said_ = finding.line.removeprefix(f"Redis {finding.setting.name} ")
    if finding.ok:
        return ok(name, said_)
    if finding.value is None:
        return warn(name, said_)
    if finding.setting.name == "maxmemory-policy" or cfg.strict:
        return fail(name, said_)
    return warn(name, f"{said_} (RECUR_STRICT=1 makes this a failure)")


def doctor_engine(url: str) -> Engine:
    """An engine that gives up after TIMEOUT seconds and keeps no connection."""
    return probe_engine(url, TIMEOUT)


def database_checks(cfg: Settings) -> list[Check]:
    """The due-jobs store answers; its schema is current; PostgreSQL is set up for it."""
    from scheduler.store.migrate import missing_sqlite_file, sqlite_path_problem

    url = masked(cfg.database_url)
    engine = doctor_engine(cfg.database_url)
    try:
        if (refused := sqlite_path_problem(engine)) is not None:  # a directory, none to be in
            return [fail("database", str(refused))]
        missing = missing_sqlite_file(engine)
        if missing is not None:
            return [fail("database", f"{url}: {missing.resolve()} does not exist: run "
                                     f"`recur db upgrade` to create it")]
        try:
            with translated(url), engine.connect() as conn:
                found = [ok("database", f"reachable at {url}")]
                if engine.dialect.name == "postgresql":
                    found += postgres_checks(conn)
            found += sqlite_checks(engine)
        except StoreUnavailable as exc:
            return [fail("database", f"cannot reach {url}: {driver_line(exc.__cause__ or exc)}"
                                     f": start it, or "
                                     f"fix RECUR_DATABASE_URL (schema not checked)")]
        return [*found, schema_check(engine)]
    finally:
        engine.dispose()


def sqlite_checks(engine: Engine) -> list[Check]:
    """A SQLite store the scheduler and the workers can write (none for PostgreSQL)."""
    from scheduler.store.migrate import sqlite_unwritable

    if engine.dialect.name != "sqlite":
        return []
    try:
        refused = sqlite_unwritable(engine)
    except StoreUnavailable as exc:  # another writer holds the lock: not a verdict
        return [warn("sqlite writable", f"not checked: {exc}")]
    if refused is not None:
        return [fail("sqlite writable", f"no: {refused}: the scheduler, the workers' "
                                        "reschedules and `recur db upgrade` cannot write")]
    return [ok("sqlite writable", "yes")]


def driver_line(exc: BaseException) -> str:
    """The driver's own message, on one line (without SQLAlchemy's background link)."""
    orig: Any = getattr(exc, "orig", None) or exc
    return f"{type(orig).__name__}: {' '.join(str(orig).split()) or '-'}"


def schema_check(engine: Engine) -> Check:
    from scheduler.store.migrate import check_schema, head_revision

    try:
        check_schema(engine)
    except StoreUnusable as exc:
        return fail("schema", str(exc))
    return ok("schema", f"at revision {head_revision()}, this code's newest")


def postgres_checks(conn: Connection) -> list[Check]:
    """synchronous_commit and autovacuum, as this role sees them on this database."""
    def show(name: str) -> str:
        return server_setting(conn, name)

    found = [writable(show("transaction_read_only")),
             synchronous_commit(show("synchronous_commit"))]
    autovacuum = show("autovacuum")
    if autovacuum != "on":
        found.append(warn("postgres autovacuum", f"is {autovacuum}: every run of a job writes "
                          f"a new row version, so without autovacuum the due-jobs table and "
                          f"its indexes bloat and the drain slows (docs/scale.md): set "
                          f"autovacuum = on"))
    elif show("track_counts") != "on":
        found.append(warn("postgres autovacuum", "is on but track_counts is off, so it never "
                          "starts: set track_counts = on"))
    else:
        found.append(tables_vacuumed(conn))
    return found


def writable(read_only: str) -> Check:
    """A read-only session (a hot standby's URL, default_transaction_read_only) reads fine
    but stops the scheduler at its first write and fails every run's reschedule."""
    if read_only == "on":
        return fail("postgres writable", "no: this role's sessions are read-only (a hot "
                    "standby, or default_transaction_read_only = on): the scheduler, the "
                    "workers' reschedules and `recur db upgrade` cannot write. Point "
                    "RECUR_DATABASE_URL at the primary, or ALTER ROLE ... RESET "
                    "default_transaction_read_only")
    return ok("postgres writable", "yes: sessions are read-write")


def synchronous_commit(value: str) -> Check:
    if value == "off":
        return fail("postgres synchronous_commit", "is off: a crash of the server can lose "
                    "commits it acknowledged (an apply_async that returned, a dispatch), which "
                    "recur counts on; recur turns it off only for writes it journals. Set "
                    "synchronous_commit = on (postgresql.conf, or ALTER ROLE/DATABASE ... "
                    "RESET synchronous_commit)")
    return ok("postgres synchronous_commit", f"is {value}")


def tables_vacuumed(conn: Connection) -> Check:
    """autovacuum on, and not switched off for one of recur's tables."""
    rows = table_options(conn)
    off = [name for name, options in rows
           if any(o.lower() in ("autovacuum_enabled=false", "autovacuum_enabled=off",
                                "autovacuum_enabled=0", "autovacuum_enabled=no")
                  for o in options or [])]
    if off:
        return warn("postgres autovacuum", f"is off for {', '.join(sorted(off))}: ALTER TABLE "
                    f"... RESET (autovacuum_enabled)")
    return ok("postgres autovacuum", "is on")
