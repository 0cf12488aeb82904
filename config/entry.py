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
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from config.absent_imports import absent
from config.errors import EXIT_ERROR, ConfigError, one_line
from config.settings_report import settings_report
from config.text import is_unicode

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
    if line := _not_utf8(args):
        print(f"recur: {line}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    try:
        command = [a for a in args if a != "--debug"][:1]
        if command == ["status"]:
            # The cyclic collector's passes over what the imports create were ~10 % of
            # the wall time; a command this short leaves the little it frees to its exit.
            gc.disable()
            with absent(UNUSED_BY_STATUS):  # config/absent_imports.py
                from scheduler.status.command import alone

                _run(alone(), args)
            return
        try:
            from tasks.cli import cli
        except ConfigError:
            if command == ["settings"]:
                sys.exit(settings_report())
            raise
        _run(cli, args)
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


def _not_utf8(args: Sequence[str]) -> str | None:
    """The line naming the first argument that is not UTF-8 text (its bytes arrive as lone
    surrogates, which every driver refuses with a traceback), or None."""
    for number, arg in enumerate(args, 1):
        if not is_unicode(arg):
            try:  # the bytes it was given, \xff for each that is not UTF-8
                raw = arg.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = arg.encode("utf-8", "backslashreplace")
            shown = raw.decode("utf-8", "backslashreplace")[:60]
            return f"argument {number} '{shown}' is not valid UTF-8 text"
    return None


def _run(command: Any, args: list[str]) -> None:
    """Run a click command; a usage error (unknown option, a value that is not a number,
    a missing argument) is one ``recur: …`` line too, not click's usage block."""
    import click

    try:
        code = command.main(args, prog_name="recur", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # `recur`, `recur jobs`: the help
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)  # a usage error's command: "jobs list"
        path = ctx.command_path.partition(" ")[2] if ctx is not None else ""
        where = f"{path}: " if path else ""
        line = " ".join((where + exc.format_message()).split())
        print(f"recur: {line[:300]}{'...' if len(line) > 300 else ''}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except click.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # `recur jobs list | head`: the reader left; nothing to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the interpreter closes it at exit
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
