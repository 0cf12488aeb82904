"""``recur doctor``: run every group of checks, print their lines and a summary."""

from __future__ import annotations

import sys

import click

from config.errors import EXIT_ERROR
from config.settings import Settings, settings
from tasks.cli.doctor.check import FAIL, OK, WARN, Check, CheckGroup, fail, ok, said, warn
from tasks.cli.group import cli


def groups() -> list[tuple[str, CheckGroup]]:
    """Each service's checks, in the order they print."""
    from tasks.cli.doctor import passwords, rabbit, services

    return [("rabbitmq", rabbit.checks), ("redis", services.redis_checks),
            ("database", services.database_checks),
            ("passwords", passwords.checks), ("settings", setting_checks)]


def setting_checks(cfg: Settings) -> list[Check]:
    """Settings that start but weaken a guarantee (a lease under a bucket's time limit)."""
    from config.checks import lease_warnings

    lines = lease_warnings(cfg.lease_seconds, cfg.buckets)
    return [warn("lease", line) for line in lines] or [
        ok("lease", f"RECUR_LEASE_SECONDS={cfg.lease_seconds:g} outlasts every bucket's "
                    "time limit")]


def run_checks(cfg: Settings) -> list[Check]:
    """Every check; one service down or a check that raised never stops the others."""
    found: list[Check] = []
    for name, group in groups():
        try:
            found.extend(group(cfg))
        except Exception as exc:  # "never a traceback": the failure becomes its line
            found.append(fail(name, f"the check could not run: {said(exc)}"))
    return found


def report(found: list[Check]) -> int:
    """Print the lines and a summary; the exit code (2 on any FAIL)."""
    for check in found:
        click.echo(check.line())
    failed = [c for c in found if c.level == FAIL]
    counts = {level: sum(c.level == level for c in found) for level in (OK, WARN, FAIL)}
    click.echo(f"doctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} FAIL")
    if not failed:
        return 0
    names = ", ".join(dict.fromkeys(c.name for c in failed))
    click.echo(f"recur: doctor: {len(failed)} check(s) failed: {names}", err=True)
    sys.stderr.flush()
    return EXIT_ERROR


@cli.command()
def doctor() -> None:
    """Check the running deployment: services reachable, Redis, PostgreSQL and RabbitMQ set
    up as recur needs, passwords, the schema revision. Exit code 2 on a FAIL."""
    sys.exit(report(run_checks(settings())))
