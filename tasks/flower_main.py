"""``recur flower``'s process: Flower, with the two things recur needs changed.

- ``/metrics`` asks for the same basic-auth credentials as every other page
  (Flower serves it to anyone); it would show task names and worker names.
- The Broker page lists every recur queue, the ``.dead`` ones included, not
  only the queues workers consume right now: an operator must see what died.

Run as ``python -m tasks.flower_main -A tasks flower …`` (``recur flower`` does).
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

from tornado import web


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

    patch_flower()
    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
