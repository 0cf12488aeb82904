"""The ``recur`` console script: every command runs inside one error wrapper.

A :class:`RecurError`, or a driver error (SQLAlchemy, kombu/amqp, redis-py, a
refused socket) that escaped a command, ends the command with one line
``recur: …`` on stderr and exit code 2, never a traceback; ``recur --debug …``
shows the traceback as well. The wrapper lives here, outside the ``tasks``
package, because importing ``tasks`` builds the Celery app from the settings:
a bad setting must already be inside the wrapper, and ``recur settings`` must
still be able to list every bad variable.

``recur status`` does not import ``tasks`` at all: its command lives in
scheduler/status/ and runs on a group of its own, so the command costs the store's,
the broker's and Redis' drivers, not the Celery app (docs/operations.md); what
those drivers import and the command never uses is left out (UNUSED_BY_STATUS).
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Sequence

from config.absent_imports import absent
from config.errors import EXIT_ERROR, ConfigError, one_line
from config.settings_report import settings_report

__all__ = ["EXIT_ERROR", "main"]


#: Imported by libraries the command uses, yet never used by it, each in a ``try``
#: that goes on without it: redis-py loads OpenTelemetry's metrics (the ``otel`` extra)
#: for metrics it exports only when configured; kombu loads PyYAML for a serializer
#: (the command sends and reads no message). ~0.1 s of the command's imports.
UNUSED_BY_STATUS = ("opentelemetry.sdk.metrics", "opentelemetry.metrics", "yaml")


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``recur`` with ``argv`` (default: the command line)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args[:1]
    try:
        command = [a for a in args if a != "--debug"][:1]
        if command == ["status"]:
            # The cyclic collector's passes over what the imports create were ~10 % of
            # the wall time; a command this short leaves the little it frees to its exit.
            gc.disable()
            with absent(UNUSED_BY_STATUS):  # config/absent_imports.py
                from scheduler.status.command import alone

                alone().main(args, prog_name="recur", standalone_mode=True)
            return
        try:
            from tasks.cli import cli
        except ConfigError:
            if command == ["settings"]:
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
