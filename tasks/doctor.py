"""``recur doctor``: is this deployment set up the way recur needs it?

It asks the running services, with the process's own settings, and prints one
line per check: ``ok``; ``warn`` (it works, but a guarantee is weaker than the
docs promise, or could not be verified); ``FAIL`` (something is lost, exposed
or cannot work), each with what to do. Exit code 2 on any FAIL, else 0. A
check that raises is a FAIL line, never a traceback. What each check asks and
why: docs/security.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import click

from config.checks import is_loopback as address_is_loopback
from config.entry import EXIT_ERROR, one_line
from config.redact import masked
from config.settings import Settings, settings

OK, WARN, FAIL = "ok", "warn", "FAIL"


def is_loopback(host: str | None) -> bool:
    """Whether a URL's ``host`` is this machine only (None: a Unix socket, local too)."""
    return not host or address_is_loopback(host.strip("[]"))


def said(exc: BaseException) -> str:
    """An error as one line: ours or a driver's as config.entry reports it, else its type."""
    line = one_line(exc)
    return line if line is not None else f"{type(exc).__name__}: {' '.join(str(exc).split())}"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    level: str
    name: str
    text: str

    def line(self) -> str:
        return masked(f"{self.level:<4}  {self.name}: {self.text}")


def ok(name: str, text: str) -> Check:
    return Check(OK, name, text)


def warn(name: str, text: str) -> Check:
    return Check(WARN, name, text)


def fail(name: str, text: str) -> Check:
    return Check(FAIL, name, text)


CheckGroup = Callable[[Settings], list[Check]]


def groups() -> list[tuple[str, CheckGroup]]:
    """Each service's checks, in the order they print."""
    from tasks import doctor_rabbit, doctor_secrets, doctor_services

    return [("rabbitmq", doctor_rabbit.checks), ("redis", doctor_services.redis_checks),
            ("database", doctor_services.database_checks),
            ("passwords", doctor_secrets.checks), ("settings", setting_checks)]


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


@click.command()
def doctor() -> None:
    """Check the running deployment: services reachable, Redis, PostgreSQL and RabbitMQ set
    up as recur needs, passwords, the schema revision. Exit code 2 on a FAIL."""
    sys.exit(report(run_checks(settings())))
