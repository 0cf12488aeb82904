"""Serve a process's Prometheus metrics on RECUR_METRICS_PORT (0: off).

The server listens on RECUR_METRICS_BIND (default 127.0.0.1: this host only)
and, with RECUR_METRICS_USER / RECUR_METRICS_PASSWORD, asks every request for
those basic-auth credentials (401 without them): metrics name tasks, buckets,
queues and destinations, which are nobody else's business.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import io
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from config.checks import is_loopback
from config.errors import ConfigError
from config.lazy_metrics import create_all
from config.settings import Settings

# prometheus_client (~2 MB) and wsgiref with http.server (~1 MB, 15 modules) are imported
# when metrics are served: every worker imports this module, most serve nothing.
if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger("recur.metrics")

#: prometheus_client's directory for processes that share one endpoint (prefork workers).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REALM = "recur metrics"
#: Seconds a client gets to send its request head, and again to read the answer: a slow or
#: silent client (slowloris, a bare connect) holds its thread no longer.
REQUEST_SECONDS = 10.0
#: Connections served at once (a thread each); more are closed unanswered, so a flood
#: costs threads up to this and no more.
MAX_CONNECTIONS = 64

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def require_basic_auth(app: WSGIApp, user: str, password: str) -> WSGIApp:
    """``app`` behind HTTP basic auth: 401 unless the request carries ``user``/``password``.

    Both halves are compared with :func:`hmac.compare_digest`, always both, so the
    time taken says nothing about which one was wrong, or how much of it.
    """
    want_user, want_password = user.encode(), password.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given_user, given_password = _credentials(environ.get("HTTP_AUTHORIZATION", ""))
        user_ok = hmac.compare_digest(given_user, want_user)
        password_ok = hmac.compare_digest(given_password, want_password)
        if user_ok and password_ok:
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
            ("Content-Type", "text/plain; charset=utf-8")])
        return [b"401 Unauthorized: this /metrics needs RECUR_METRICS_USER's credentials\n"]

    return guarded


def only_metrics_path(app: WSGIApp) -> WSGIApp:
    """``app`` at ``/metrics`` only: any other path is 404, not the metrics again."""

    def routed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") in ("/metrics", "/metrics/"):
            return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"404 Not Found: the metrics are at /metrics\n"]

    return routed


def _credentials(header: str) -> tuple[bytes, bytes]:
    """(user, password) of a basic-auth header; empty ones when it is missing or malformed."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return b"", b""
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b"", b""
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else (b"", b"")


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes until a deadline: one byte a second does not keep a request open."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.sock, self.deadline = sock, time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not received in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


def start_server(bind: str, port: int, app: WSGIApp) -> ThreadingWSGIServer:
    """Serve ``app`` on ``bind``:``port`` (IPv4 or IPv6) from a daemon thread."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer

    class QuietHandler(WSGIRequestHandler):
        """No access log line per scrape on stderr; a slow or vanished client is dropped."""

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, REQUEST_SECONDS))

        def parse_request(self) -> bool:
            parsed: bool = super().parse_request()
            self.connection.settimeout(REQUEST_SECONDS)  # the head is read: now the answer
            return parsed

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:  # too slow (TimeoutError), reset, gone: nobody to answer
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0][0]

    class MetricsServer(ThreadingWSGIServer):
        """At most MAX_CONNECTIONS handler threads; a connection beyond them is closed."""

        address_family = family
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self.slots.acquire(blocking=False):
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

    server: ThreadingWSGIServer = make_server(bind, port, app, MetricsServer,
                                              handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="recur-metrics", daemon=True).start()
    return server


def _registry() -> CollectorRegistry:
    """The process's registry, or one reading every prefork child's files."""
    from prometheus_client import REGISTRY, CollectorRegistry

    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def serve_metrics(cfg: Settings, registry: CollectorRegistry | None = None,
                  what: str = "process") -> int | None:
    """Start the /metrics endpoint in a daemon thread; returns its port (None: off)."""
    if not cfg.metrics_port:
        return None
    from prometheus_client import make_wsgi_app

    if registry is None:
        create_all()  # every declared metric listed from the first scrape (lazy_metrics.py)
        registry = _registry()
    app: WSGIApp = only_metrics_path(make_wsgi_app(registry))
    if cfg.metrics_user:
        app = require_basic_auth(app, cfg.metrics_user, cfg.metrics_password)
    try:
        start_server(cfg.metrics_bind, cfg.metrics_port, app)
    except OSError as exc:  # socket.gaierror included: a bind host that does not resolve
        raise ConfigError(f"RECUR_METRICS_PORT={cfg.metrics_port} on RECUR_METRICS_BIND="
                          f"{cfg.metrics_bind}: cannot serve {what} metrics: {exc}") from exc
    auth = " (basic auth)" if cfg.metrics_user else ""
    log.info("%s metrics on http://%s:%d/metrics%s", what, cfg.metrics_bind, cfg.metrics_port,
             auth)
    if not cfg.metrics_user and not is_loopback(cfg.metrics_bind):
        log.warning("%s metrics on %s:%d are open to anyone who can reach that address: set "
                    "RECUR_METRICS_USER and RECUR_METRICS_PASSWORD", what, cfg.metrics_bind,
                    cfg.metrics_port)
    return cfg.metrics_port


def exports_metrics(cfg: Settings) -> bool:
    """Whether this process's metrics are read by anyone: it serves them
    (RECUR_METRICS_PORT) or writes them for a process that does (PROMETHEUS_MULTIPROC_DIR)."""
    return bool(cfg.metrics_port or os.environ.get(MULTIPROC_ENV))
