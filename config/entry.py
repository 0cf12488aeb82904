"""The ``recur`` console script: every command runs inside one error wrapper.

A :class:`RecurError`, or a driver error (SQLAlchemy, kombu/amqp, redis-py, a
refused socket) that escaped a command, ends the command with one line
``recur: …`` on stderr and exit code 2, never a traceback; ``recur --debug …``
shows the traceback as well. The wrapper lives here, outside the ``tasks``
package, because importing ``tasks`` builds the Celery app from the settings:
a bad setting must already be inside the wrapper, and ``recur settings`` must
still be able to list every bad variable.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

from config.errors import ConfigError, RecurError
from config.redact import masked

#: Exit code of a command that failed with one of our errors (click uses 2 for usage too).
EXIT_ERROR = 2
__all__ = ["EXIT_ERROR", "driver_service", "main", "masked", "one_line", "settings_report"]


def one_line(exc: BaseException) -> str | None:
    """The line an error is reported as, or None when it is not ours to report (a bug)."""
    if isinstance(exc, RecurError):
        text = str(exc)
    else:
        service = driver_service(exc)
        if service is None:
            return None
        text = f"{service}: {type(exc).__name__}: {exc}"
    return masked(" ".join(text.split())) or type(exc).__name__


def driver_service(exc: BaseException) -> str | None:
    """Which service a driver's error came from (None: not a driver error)."""
    checks: list[tuple[str, str, str]] = [
        ("sqlalchemy.exc", "SQLAlchemyError", "due-jobs database"),
        ("redis.exceptions", "RedisError", "Redis"),
        ("kombu.exceptions", "OperationalError", "broker"),
        ("amqp.exceptions", "AMQPError", "broker"),
    ]
    for module, name, service in checks:
        found = sys.modules.get(module)
        if found is not None and isinstance(exc, getattr(found, name)):
            return service
    if isinstance(exc, ConnectionError | TimeoutError):
        return "connection"
    return None


def settings_report() -> int:
    """``recur settings`` without the Celery app: every setting (default, why, bounds, and
    the value in effect when one is set, secrets masked), then every bad variable."""
    import os

    from config.settings import PREFIX, describe, problems, shown

    for var, default, doc in describe():
        print(f"{var}={default}\n    {doc}")
        if var in os.environ:
            print(f"    set: {shown(var[len(PREFIX):].lower(), os.environ[var])}")
    _, bad = problems()
    for line in bad:
        print(f"recur: {line}", file=sys.stderr)
    return EXIT_ERROR if bad else 0


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``recur`` with ``argv`` (default: the command line)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args[:1]
    try:
        try:
            from tasks.cli import cli
        except ConfigError:
            if [a for a in args if a != "--debug"][:1] == ["settings"]:
                sys.exit(settings_report())
            raise
        cli.main(args, prog_name="recur", standalone_mode=True)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        line = one_line(exc)
        if line is None:
            raise
        if debug:
            traceback.print_exc()
        print(f"recur: {line}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


if __name__ == "__main__":
    main()
