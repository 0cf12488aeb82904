"""Redis must keep what recur writes: ``maxmemory-policy noeviction`` and AOF.

A user's parked jobs, the lock's job numbers and the resequencer's entries live
only in Redis (docs/distlock.md). An evicting policy deletes them when Redis is
full (lost messages, a finished job run again); without AOF a restart empties
Redis. So workers and the scheduler check at start: a WARNING line per missing
setting, or with ``RECUR_STRICT=1`` no start at all; ``recur doctor`` checks on
demand. Managed Redis often disables ``CONFIG``: ``INFO`` is read instead, and a
setting neither shows is reported as unknown, never a crash.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from config.errors import ConfigError, ServiceMisconfigured, ServiceRefused, ServiceUnavailable
from config.redact import masked
from config.settings import Settings
from routing.redis_client import redis_errors, refused

log = logging.getLogger("recur.redis")

#: Seconds the start-up check waits for Redis: an unreachable Redis is an outage the
#: processes ride out (a warning), not a reason to hold their start.
CHECK_TIMEOUT = 3.0


@dataclass(frozen=True)
class Required:
    """A Redis setting recur needs, where INFO shows it, and why."""

    name: str
    wanted: str
    info_field: str
    why: str


REQUIRED = (
    Required("maxmemory-policy", "noeviction", "maxmemory_policy",
             "an evicting policy deletes parked jobs and lock state when Redis is full"),
    Required("appendonly", "yes", "aof_enabled",
             "without AOF a restart empties Redis: parked jobs are lost, finished jobs "
             "can run again"),
)


@dataclass(frozen=True)
class Finding:
    """One required setting as Redis reported it (``value`` None: it could not be read)."""

    setting: Required
    value: str | None
    line: str

    @property
    def ok(self) -> bool:
        return self.value == self.setting.wanted

    @property
    def wrong(self) -> bool:
        """Read, and not what recur needs (unreadable is not wrong: it is unknown)."""
        return self.value is not None and not self.ok


def check_client(url: str, timeout: float = CHECK_TIMEOUT) -> redis.Redis:
    """A one-attempt client for checks: no retries, short timeouts."""
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout,
                                socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))


def read_config(client: redis.Redis) -> tuple[dict[str, str], str]:
    """Each required setting's value, and why some could not be read ("" when all were).

    CONFIG GET first; where it is refused (renamed, disabled, no ACL permission), INFO.
    Connection errors propagate: the caller says Redis is unreachable.
    """
    values: dict[str, str] = {}
    for setting in REQUIRED:
        got, why = refused(partial(client.config_get, setting.name))
        if got is None:
            unread = f"CONFIG GET is refused ({why})"
            break
        if setting.name in got:
            values[setting.name] = str(got[setting.name])
    else:
        if len(values) == len(REQUIRED):
            return values, ""
        unread = "CONFIG GET does not show it"
    info, why = refused(lambda: {**client.info("memory"), **client.info("persistence")})
    if info is None:
        return values, f"{unread}; INFO is refused too ({why})"
    return {**_from_info(info), **values}, f"{unread}; INFO does not show it"


def _from_info(info: dict[str, object]) -> dict[str, str]:
    """The required settings as INFO memory/persistence show them (aof_enabled 1 = yes)."""
    values = {}
    for setting in REQUIRED:
        if setting.info_field in info:
            raw = str(info[setting.info_field])
            values[setting.name] = {"1": "yes", "0": "no"}.get(raw, raw)
    return values


def findings(client: redis.Redis) -> list[Finding]:
    """One finding per required setting, each with its one line (what is wrong, the fix)."""
    values, refused = read_config(client)
    found = []
    for setting in REQUIRED:
        value = values.get(setting.name)
        found.append(Finding(setting, value, _line(setting, value, refused)))
    return found


def _line(setting: Required, value: str | None, refused: str) -> str:
    if value == setting.wanted:
        return f"Redis {setting.name} is {value}"
    if value is None:
        return (f"Redis {setting.name} cannot be read ({refused}): make sure it is "
                f"{setting.wanted} (a managed Redis: in its parameter group)")
    return (f"Redis {setting.name} is {value}, recur needs {setting.wanted} ({setting.why}): "
            f"fix with CONFIG SET {setting.name} {setting.wanted} and the same line in "
            f"redis.conf (docs/distlock.md)")


def check_redis_at_start(cfg: Settings, process: str,
                         warn: Callable[[str], None] | None = None) -> None:
    """WARN for each missing setting; with RECUR_STRICT=1 raise ServiceMisconfigured instead.

    An unreachable Redis is a warning whatever RECUR_STRICT says: it is an outage the
    process rides out, and its settings are checked again at the next start. One that
    refuses the URL's password raises ServiceRefused: no wait fixes it.
    ``warn`` shows a warning line (default: the ``recur.redis`` logger).
    """
    warn = warn or _log_warning
    try:
        with redis_errors():
            client = check_client(cfg.redis_url)
            try:
                found = findings(client)
            finally:
                client.close()
    # Down, or a URL redis-py cannot read: the process's own use says so.
    except (ServiceUnavailable, OSError, ValueError) as exc:
        # Named as redis-py named it (ConnectionError: ...), not as our translation.
        said = exc.__cause__ if isinstance(exc, ServiceUnavailable) and exc.__cause__ else exc
        if isinstance(said, redis.AuthenticationError):  # no retry fixes a password
            raise ServiceRefused(
                f"Redis {masked(cfg.redis_url)} refused recur's credentials "
                f"({type(said).__name__}: {said}): set the password (and user) Redis "
                f"expects in RECUR_REDIS_URL; the {process} does not start") from exc
        warn(f"cannot check Redis's settings at start ({type(said).__name__}: {said}); "
             f"the {process} starts anyway")
        return
    wrong = [f for f in found if f.wrong]
    if cfg.strict and wrong:
        raise ServiceMisconfigured("; ".join(f.line for f in wrong) +
                                   f"; RECUR_STRICT=1: the {process} does not start")
    for finding in found:
        if not finding.ok:
            warn(finding.line)


def _log_warning(line: str) -> None:
    log.warning("%s", line)


def _stderr_warning(line: str) -> None:
    """A warning before the process's logging is set up (Celery configures it later)."""
    print(f"[WARNING/recur.redis] {line}", file=sys.stderr, flush=True)


def exit_unless_redis_ok(cfg: Settings, process: str) -> None:
    """check_redis_at_start for a start-up hook that swallows exceptions (Celery's signals):
    a refusal (settings, credentials) is one ``recur: ...`` line on stderr and exit code 2."""
    from config.errors import EXIT_ERROR

    try:
        check_redis_at_start(cfg, process, _stderr_warning)
    except ConfigError as exc:  # misconfigured (RECUR_STRICT=1) or refusing our credentials
        print(f"recur: {masked(str(exc))}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ERROR) from exc
