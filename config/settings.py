"""One typed settings object, read from ``RECUR_*`` environment variables.

Every field has a default that works on one machine with the local services and
a one-line reason. A ``RECUR_`` variable that names no field, or a value that
does not parse, is a :class:`ConfigError` naming the variable: a misspelt
setting must never be silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from types import MappingProxyType
from typing import Any

from config.buckets import BUCKETS_BY_NAME, DEFAULT_KINDS
from config.errors import ConfigError

PREFIX = "RECUR_"


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class Settings:
    """recur's configuration. Build it with :func:`load_settings`."""

    broker_url: str = field(
        default="amqp://guest:guest@127.0.0.1:5672//",
        metadata=_doc("RabbitMQ; the local broker with its stock credentials."))
    redis_url: str = field(
        default="redis://127.0.0.1:6379/0",
        metadata=_doc("Redis for locks, resequencer state and task results."))
    database_url: str = field(
        default="sqlite:///recur.sqlite3",
        metadata=_doc("Due-jobs store; SQLite is the embedded one-machine default, "
                      "use postgresql+psycopg://... in production."))
    result_backend: str = field(
        default="",
        metadata=_doc("Celery result backend; empty means redis_url (chords need Redis)."))
    key_prefix: str = field(
        default="recur",
        metadata=_doc("Prefix of every Redis key, so several deployments or test runs "
                      "can share one Redis."))
    max_payload_bytes: int = field(
        default=1024,
        metadata=_doc("Largest encoded payload accepted; the population's messages "
                      "are under 100 bytes, so 1 KiB catches mistakes, not data."))
    max_deliveries: int = field(
        default=5,
        metadata=_doc("Deliveries of one message before it is dead-lettered; enough "
                      "to survive a few worker crashes, few enough to stop a poison loop."))
    queue_type: str = field(
        default="quorum",
        metadata=_doc("'quorum' (replicated, has delivery limits) or 'classic'."))
    work_scale: float = field(
        default=1.0,
        metadata=_doc("Multiplier of process_message's simulated work; demos and "
                      "tests shrink it."))
    completion_log_maxlen: int = field(
        default=100_000,
        metadata=_doc("Entries kept in the Redis stream of completed tasks (bounded so "
                      "it never grows with the population); 0 turns it off."))
    kinds: Mapping[str, str] = field(
        default_factory=lambda: DEFAULT_KINDS,
        metadata=_doc("Extra message kinds as 'kind:bucket,kind:bucket'; they add to "
                      "or override the defaults in config/buckets.py."))
    flower_user: str = field(
        default="",
        metadata=_doc("Flower basic-auth user; no default: Flower refuses to start "
                      "without credentials."))
    flower_password: str = field(
        default="",
        metadata=_doc("Flower basic-auth password; no default, see flower_user."))
    flower_port: int = field(
        default=5555,
        metadata=_doc("Port Flower listens on (its usual one)."))
    log_level: str = field(
        default="INFO",
        metadata=_doc("Log level of recur's processes."))

    @property
    def results_url(self) -> str:
        """The Celery result backend URL actually used."""
        return self.result_backend or self.redis_url


def _parse_kinds(raw: str) -> Mapping[str, str]:
    kinds = dict(DEFAULT_KINDS)
    for item in filter(None, (part.strip() for part in raw.split(","))):
        kind, sep, bucket = item.partition(":")
        if not sep or not kind.strip() or not bucket.strip():
            raise ValueError(f"{item!r} is not 'kind:bucket'")
        if bucket.strip() not in BUCKETS_BY_NAME:
            raise ValueError(f"kind {kind.strip()!r} maps to unknown bucket {bucket.strip()!r}"
                             f" (buckets: {', '.join(BUCKETS_BY_NAME)})")
        kinds[kind.strip()] = bucket.strip()
    return MappingProxyType(kinds)


def _parse(name: str, kind: Any, raw: str) -> Any:
    if name == "kinds":
        return _parse_kinds(raw)
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw


def _check(values: dict[str, Any]) -> None:
    if values.get("queue_type", "quorum") not in ("quorum", "classic"):
        raise ValueError("queue_type must be 'quorum' or 'classic'")
    for name in ("max_payload_bytes", "max_deliveries"):
        if name in values and values[name] < 1:
            raise ValueError(f"{name} must be at least 1")
    for name in ("work_scale", "completion_log_maxlen"):
        if name in values and values[name] < 0:
            raise ValueError(f"{name} must not be negative")


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ
    known = {f.name: f for f in fields(Settings)}
    values: dict[str, Any] = {}
    for var, raw in env.items():
        if not var.startswith(PREFIX):
            continue
        name = var[len(PREFIX):].lower()
        if name not in known:
            raise ConfigError(f"{var}: unknown setting (known: "
                              f"{', '.join(PREFIX + n.upper() for n in known)})")
        try:
            values[name] = _parse(name, known[name].type, raw)
            _check({name: values[name]})
        except ValueError as exc:
            raise ConfigError(f"{var}={raw!r}: {exc}") from exc
    return Settings(**values)


@cache
def settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return load_settings()


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, reason) for every setting: the documentation table."""
    rows = []
    for f in fields(Settings):
        default = f.default_factory() if callable(f.default_factory) else f.default
        shown = ",".join(f"{k}:{v}" for k, v in default.items()) if isinstance(
            default, Mapping) else str(default)
        rows.append((PREFIX + f.name.upper(), shown, f.metadata["doc"]))
    return rows
