"""``recur flower``'s process: Flower, with what recur needs changed or added.

- ``/metrics`` asks for the same basic-auth credentials as every other page
  (Flower serves it to anyone); it would show task names and worker names.
- The Broker page lists every recur queue, the ``.dead`` ones included, not
  only the queues workers consume right now: an operator must see what died.
- A Scheduled page (``/scheduled``, tasks/cli/flower_pages.py) shows and acts on
  the jobs waiting in the due-jobs store, which Flower cannot see.

Its one login comes from RECUR_FLOWER_USER / RECUR_FLOWER_PASSWORD through
:func:`basic_auth`, which refuses what Flower would misread: it splits its
``basic_auth`` on commas, so a password ``a,b`` would also let in anyone who
sends the bare credentials ``b``.

Run as ``python -m tasks.cli.flower_main -A tasks flower …`` (``recur flower`` does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from tornado import web

from config.errors import EXIT_ERROR, ConfigError
from tasks.cli.flower_pages import install as install_pages

#: Flower options that would add logins beside (or instead of) the checked one.
AUTH_OPTIONS = ("--basic-auth", "--basic_auth", "--auth")


def basic_auth(user: str, password: str) -> str:
    """Flower's ``basic_auth`` value for one login; ConfigError for one Flower would misread.

    Flower splits the value on commas into ``user:password`` entries and compares a
    request's whole ``user:password`` with each, as ASCII text.
    """
    if not user or not password:
        raise ConfigError("RECUR_FLOWER_USER and RECUR_FLOWER_PASSWORD must be set: "
                          "Flower never runs without authentication")
    for var, value, banned in (("RECUR_FLOWER_USER", user, ",:"),
                               ("RECUR_FLOWER_PASSWORD", password, ",")):
        found = sorted({c for c in value if c in banned})
        if found:
            raise ConfigError(f"{var} must not contain {' or '.join(map(repr, found))}: Flower "
                              "splits its logins on ',' (each piece would let anyone in) and "
                              "ends the user at the first ':'")
        if not value.isascii() or not value.isprintable():
            raise ConfigError(f"{var} must be printable ASCII: Flower compares logins as "
                              "ASCII text, so no one could log in")
    return f"{user}:{password}"


def check_auth(environ: Mapping[str, str], argv: list[str]) -> None:
    """Refuse to start Flower with any login but the one :func:`basic_auth` checked."""
    given = environ.get("FLOWER_BASIC_AUTH", "")
    user, _, password = given.partition(":")
    basic_auth(user, password)
    extra = [a for a in argv if a.split("=")[0] in AUTH_OPTIONS]
    if extra:
        raise ConfigError(f"{extra[0].split('=')[0]} is not passed on: Flower's login is "
                          "RECUR_FLOWER_USER / RECUR_FLOWER_PASSWORD")


def broker_api(broker_url: str, configured: str = "") -> str:
    """The RabbitMQ management API URL (RECUR_FLOWER_BROKER_API, or the broker URL's host
    and credentials on the management plugin's port)."""
    if configured:
        return configured
    url = urlsplit(broker_url)
    userinfo = url.netloc.rpartition("@")[0] or "guest:guest"
    return f"http://{userinfo}@{url.hostname or 'localhost'}:15672/api/"


def patch_flower() -> None:
    """Protect /metrics and widen the Broker page's queue list (idempotent)."""
    from flower.views import BaseHandler
    from flower.views.monitor import Metrics

    from routing.queues import all_queue_names

    if getattr(Metrics, "_recur_patched", False):
        return
    Metrics.get = web.authenticated(Metrics.get)
    listed = BaseHandler.get_active_queue_names

    def every_queue(self: Any) -> list[str]:
        return sorted(set(listed(self)) | set(all_queue_names()))

    BaseHandler.get_active_queue_names = every_queue
    Metrics._recur_patched = True


def main() -> None:
    from celery.bin.celery import main as celery_main

    try:
        check_auth(os.environ, sys.argv[1:])
    except ConfigError as exc:
        print(f"recur: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    patch_flower()
    install_pages()
    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
