"""A bucket file's default rate limits: per bucket and per task, no decorator needed.

::

    [buckets.io]
    ...
    rate_limit = "10/s"      # optional: at most 10 starts a second per key, every task
    rate_burst = 5           # optional, default 1 (evenly spaced); needs rate_limit
    rate_key = "user_id"     # optional, default user_id: the message field keyed on

    [tasks."myapp.call_partner"]
    rate_limit = "2/s"       # this task's own default (beats its bucket's)
    rate_key = "payload.account"

A key is a message field: ``id``, ``user_id``, ``bucket``, ``kind`` or
``payload.<name>``. The limit is ``@rate_limit``'s (tasks/flow): one key per bucket
(or task) and field value, so two buckets never share a limit. A task's own
``@rate_limit`` wins over both. Bad values are one BucketsFileError naming the file,
the bucket (or task) and the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any

from config.errors import BucketsFileError, InvalidMessage, InvalidRateLimit
from config.rates import Rate, check_burst, parse_rate

FIELDS = ("rate_limit", "rate_burst", "rate_key")
#: Message fields a rate may be keyed on (besides ``payload.<name>``).
MESSAGE_FIELDS = ("user_id", "id", "bucket", "kind")
PAYLOAD_FIELD = re.compile(r"payload\.([A-Za-z0-9_-]{1,64})")
#: A task's name in ``[tasks."<name>"]``: what Celery task names are made of.
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
#: A problem with one field: (problem, field) -> the error naming where it is.
Error = Callable[[str, str], BucketsFileError]


@dataclass(frozen=True)
class RateDefault:
    """A default rate limit of a bucket or a task, as the bucket file gives it."""

    rate: Rate
    #: The message field keyed on: user_id, id, bucket, kind or payload.<name>.
    key: str
    #: Whose default it is, ``bucket=io`` or ``task=myapp.x``: it starts every limited
    #: key, so a bucket's limit and a task's are never one.
    scope: str

    def key_of(self, message: Mapping[str, Any]) -> str:
        """The limited key of ``message``: ``<scope>:<field's value>``; InvalidMessage
        naming the field when the message has no usable value there."""
        found = PAYLOAD_FIELD.fullmatch(self.key)
        payload = message.get("payload")
        if found is None:
            value = message.get(self.key)
        else:
            value = payload.get(found.group(1)) if isinstance(payload, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value:
            raise InvalidMessage(self.key, f"the rate limit of {self.scope} (bucket file "
                                 f"rate_key) needs a non-empty string or integer here, got "
                                 f"{value!r:.60}")
        return f"{self.scope}:{value}"


def rate_default(spec: Mapping[str, Any], scope: str, error: Error) -> RateDefault | None:
    """The default rate ``spec`` (a bucket's or a task's table) gives, None without a
    ``rate_limit``; ``error(problem, field)`` for a bad value."""
    if "rate_limit" not in spec:
        for name in ("rate_burst", "rate_key"):
            if name in spec:
                raise error("needs rate_limit (e.g. rate_limit = \"10/s\")", name)
        return None
    try:
        rate = parse_rate(spec["rate_limit"])
    except InvalidRateLimit as exc:
        raise error(str(exc), "rate_limit") from None
    try:
        rate = replace(rate, burst=check_burst(spec.get("rate_burst")))
    except InvalidRateLimit as exc:
        raise error(str(exc), "rate_burst") from None
    key = spec.get("rate_key", "user_id")
    if not isinstance(key, str) or not (key in MESSAGE_FIELDS or PAYLOAD_FIELD.fullmatch(key)):
        raise error(f"must be a message field: {', '.join(MESSAGE_FIELDS)} or "
                    f"payload.<name>, got {key!r:.60}", "rate_key")
    return RateDefault(rate, key, scope)


def task_rates(raw: Any, path: str) -> Mapping[str, RateDefault]:
    """``[tasks."<name>"]`` tables: each task's own default rate."""
    if not isinstance(raw, Mapping):
        raise _task_error(path, None, f"must be tables [tasks.\"<task name>\"], got {raw!r:.60}")
    rates: dict[str, RateDefault] = {}
    for task, spec in raw.items():
        error = partial(_task_error, path, task)
        if not TASK_NAME.fullmatch(task):
            raise _task_error(path, task[:80], "not a task name (letters, digits and '_.:-', "
                              "at most 200)")
        if not isinstance(spec, Mapping):
            raise error(f"must be a table ([tasks.\"{task}\"]), got {spec!r:.60}")
        for name in spec:
            if name not in FIELDS:
                raise error(f"unknown key (known: {', '.join(FIELDS)})", name)
        found = rate_default(spec, f"task={task}", error)
        if found is None:
            raise error("missing (a task's table gives its rate)", "rate_limit")
        rates[task] = found
    return MappingProxyType(rates)


def _task_error(path: str, task: str | None, problem: str,
                name: str | None = None) -> BucketsFileError:
    """One line: the file, the task (or ``tasks``), the field and the problem."""
    where = [path, "tasks" if task is None else f"task {task!r}", *([name] if name else [])]
    return BucketsFileError(": ".join([*where, problem]))
