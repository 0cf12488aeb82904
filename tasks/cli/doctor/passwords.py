"""``recur doctor``'s password checks (tasks/cli/doctor/command.py prints them).

A password must be set where the service can be reached from elsewhere, and
never be the ``change-me…`` placeholder of .env.example. RabbitMQ's stock
``guest``/``guest`` is fine on loopback only (RabbitMQ itself lets guest in
from the same host only, unless ``loopback_users`` was cleared). Flower's
credentials must hold no comma: Flower splits its basic-auth setting on commas,
so each piece of such a password would be a login of its own.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from config.errors import ConfigError
from config.redact import is_placeholder
from config.settings import Settings
from tasks.cli.doctor.check import Check, fail, is_loopback, ok, warn


def checks(cfg: Settings) -> list[Check]:
    found = [broker_password(cfg.broker_url), redis_password(cfg.redis_url),
             database_password(cfg.database_url), flower_credentials(cfg),
             metrics_credentials(cfg), signing(cfg)]
    if cfg.flower_broker_api:
        found.append(url_password("management API password", cfg.flower_broker_api,
                                  "RECUR_FLOWER_BROKER_API"))
    return found


def url_password(name: str, url: str, var: str) -> Check:
    """The placeholder, or no password where the host is not this machine."""
    parts = urlsplit(url)
    password = unquote(parts.password or "")
    if is_placeholder(password):
        return fail(name, f"{var} has the placeholder password of .env.example: set a real one")
    if not password and not is_loopback(parts.hostname):
        return fail(name, f"{var} has no password for {parts.hostname}, which is not this "
                          f"machine: give the service a password and put it in {var}")
    return ok(name, "set" if password else "none: the service is on this machine only")


def broker_password(url: str) -> Check:
    name, parts = "rabbitmq password", urlsplit(url)
    if (unquote(parts.username or ""), unquote(parts.password or "")) == ("guest", "guest"):
        if is_loopback(parts.hostname):
            return ok(name, "guest/guest on this machine (RabbitMQ lets guest in from "
                            "loopback only; any other host needs its own user)")
        return fail(name, f"guest/guest on {parts.hostname}: the stock account everyone "
                          f"knows, and RabbitMQ only lets it in from elsewhere when "
                          f"loopback_users was cleared: create a user with its own password")
    return url_password(name, url, "RECUR_BROKER_URL")


def redis_password(url: str) -> Check:
    parts = urlsplit(url)
    if not parts.password and is_loopback(parts.hostname):
        return ok("redis password", "none: Redis is on this machine only (set requirepass "
                                    "before it listens anywhere else)")
    return url_password("redis password", url, "RECUR_REDIS_URL")


def database_password(url: str) -> Check:
    name = "database password"
    if url.startswith("sqlite"):
        return ok(name, "none: SQLite is a file (its permissions decide who reads it)")
    parts = urlsplit(url)
    if not parts.password and not is_loopback(parts.hostname):
        return warn(name, f"RECUR_DATABASE_URL has no password for {parts.hostname}: fine if "
                          f"it comes from PGPASSWORD, ~/.pgpass or a client certificate; "
                          f"otherwise the server trusts anyone from this host")
    return url_password(name, url, "RECUR_DATABASE_URL")


def flower_credentials(cfg: Settings) -> Check:
    """Both set, no placeholder, nothing Flower would misread (tasks/cli/flower_main.py)."""
    from tasks.cli.flower_main import basic_auth

    name, user, password = "flower credentials", cfg.flower_user, cfg.flower_password
    if not user and not password:
        return ok(name, "not set (recur flower refuses to start without them)")
    if is_placeholder(password):
        return fail(name, "RECUR_FLOWER_PASSWORD is the placeholder of .env.example: set a "
                          "real one")
    try:
        basic_auth(user, password)
    except ConfigError as exc:
        return fail(name, str(exc))
    return ok(name, "set")


def metrics_credentials(cfg: Settings) -> Check:
    """Each process's /metrics: off, on loopback, or behind basic auth."""
    name, bind, port, password = "metrics", cfg.metrics_bind, cfg.metrics_port, cfg.metrics_password
    if not port:
        return ok(name, "off (RECUR_METRICS_PORT=0)")
    if is_placeholder(password):
        return fail(name, "RECUR_METRICS_PASSWORD is a placeholder: set a real one")
    if password:
        return ok(name, f"{bind}:{port} behind basic auth")
    if is_loopback(bind):
        return ok(name, f"{bind}:{port}: this machine only")
    return warn(name, f"/metrics on {bind}:{port} without a password: whoever reaches the port "
                      f"reads queue, task and worker names; publish it nowhere (compose's network "
                      f"only) or set RECUR_METRICS_USER/RECUR_METRICS_PASSWORD")


def signing(cfg: Settings) -> Check:
    """Optional: with a key, a client that can publish cannot forge control headers."""
    if cfg.signing_key:
        return ok("signing key", "set: recur_dispatch and recur_lock_* headers are signed")
    return ok("signing key", "not set: control headers are checked, not signed (anyone who "
                             "can publish to the broker can forge them; RECUR_SIGNING_KEY, "
                             "docs/security.md)")
