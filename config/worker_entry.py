"""``python -m config.worker_entry -A tasks worker …``: Celery's own ``worker`` command and
nothing else of Celery's command line; what ``recur worker`` runs.

``celery`` imports every one of its subcommands and every installed ``celery.commands``
plugin before it reads its arguments (Flower with its web framework, the ``amqp``
shell's prompt_toolkit, Pygments and PyYAML when installed): ~300 modules, 13 MB more in a
process that only ever runs ``worker``, and in each prefork child it forks. This runs
the same click command (``celery.bin.worker.worker``: the same options,
``CELERY_WORKER_*`` variables, ``app.Worker``, signals and logs) on the context the
``celery`` group would have built, so the worker cannot be told from ``celery -A
tasks worker`` but by its size. It lives beside the ``recur`` entry point, in config/,
because ``python -m tasks.…`` would build the app before an eventlet or gevent pool
could be patched in, which ``celery`` does first; the app is loaded after that, by name.
``--detach`` re-runs the full ``celery`` (Celery's own detach does so).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

USAGE = "usage: python -m config.worker_entry -A APP worker [WORKER OPTIONS]"


#: Imported, when installed, by Celery's and kombu's modules for what a worker never does:
#: Pygments colours ``celery inspect``'s output, PyYAML registers a serializer that
#: recur's JSON-only workers refuse (``accept_content``). Neither is a recur dependency.
NOT_FOR_WORKERS = ("pygments", "yaml")


def _import_worker_command() -> Any:
    """``celery.bin.worker.worker``, with NOT_FOR_WORKERS kept out while Celery loads (their
    imports fail, and Celery and kombu fall back); a task module may still import them."""
    blocked = [name for name in NOT_FOR_WORKERS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        from celery.bin.worker import worker
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return worker


def prepare(args: Sequence[str]) -> tuple[Any, Any]:
    """Check ``-A APP worker …``, patch the pool's concurrency (eventlet, gevent) as
    ``celery`` does before anything else, load the app: (the worker command, the app)."""
    if len(args) < 3 or args[0] not in ("-A", "--app") or args[2] != "worker":
        print(f"recur: {USAGE}", file=sys.stderr)
        raise SystemExit(2)
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency([sys.argv[0], *args])
    worker = _import_worker_command()
    from celery.app.utils import find_app
    from celery.bin.base import consume_preload_options

    app = find_app(args[1])
    # What the ``celery`` group does with the app before it runs a subcommand.
    worker.params.extend(app.user_options.get("worker", []))
    preload = app.user_options.get("preload", ())
    if preload:
        worker.params.extend(preload)
        worker.callback = consume_preload_options(worker.callback)
    return worker, app


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``worker`` for ``-A APP`` with the rest of ``argv`` as its options."""
    args = list(sys.argv[1:] if argv is None else argv)
    worker, app = prepare(args)
    from celery.bin.base import CLIContext

    sys.argv = [sys.argv[0], *args]  # Celery's --detach re-runs `celery` with these
    no_color = os.environ.get("NO_COLOR", "").lower() not in ("", "0", "false", "no")
    obj = CLIContext(app=app, no_color=no_color, workdir=None, quiet=False)
    worker.main(args=args[3:], prog_name="celery worker", obj=obj,
                auto_envvar_prefix="CELERY_WORKER")


if __name__ == "__main__":
    main()
