"""Every exception recur raises, under one base class.

Callers catch these, never the driver's (SQLAlchemy, redis-py, kombu): code that
talks to a service wraps its errors with ``raise X(...) from exc``. A class's
docstring is its default message.
"""

from __future__ import annotations


class RecurError(Exception):
    """recur failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(RecurError):
    """The configuration is invalid."""


class InvalidMessage(RecurError, ValueError):
    """The message is invalid; nothing was published.

    ``field`` names the part of the message that is wrong.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"invalid message: {field}: {problem}")

    def __reduce__(self) -> tuple[type[InvalidMessage], tuple[str, str]]:
        # Celery pickles/serialises exceptions across process boundaries.
        return (type(self), (self.field, self.problem))


class UnknownBucket(InvalidMessage):
    """The message names a bucket or kind that the bucket table does not define."""


class PermanentFailure(RecurError):
    """The task cannot succeed by running again; it goes to the dead-letter queue."""


class ServiceUnavailable(RecurError):
    """A service recur depends on (broker, Redis, database) cannot be reached."""
