"""Every exception recur raises, under one base class, and how an error is reported.

Callers catch these, never the driver's (SQLAlchemy, redis-py, kombu): code that
talks to a service wraps its errors with ``raise X(...) from exc``. A class's
docstring is its default message. A driver error that escaped anyway is named by
its service (:func:`driver_service`); :func:`one_line` is the line a command that
failed prints after ``recur:``, URLs masked.
"""

from __future__ import annotations

from config.redact import masked

#: Exit code of a command that failed with one of our errors (click uses 2 for usage too).
EXIT_ERROR = 2

#: (a driver's base error class, the service it names), one entry per driver, added by
#: that driver's boundary module (``register_driver``) when it is imported: the one
#: place a driver's errors are recognised, without this module importing any driver.
_DRIVERS: list[tuple[type[BaseException], str]] = []


def register_driver(error: type[BaseException], service: str) -> None:
    """Name ``service`` as where ``error`` (a driver's base class) comes from; called once
    by the module that translates that driver's errors at its boundary."""
    if (error, service) not in _DRIVERS:
        _DRIVERS.append((error, service))


def driver_service(exc: BaseException) -> str | None:
    """Which service a driver's error came from (None: not a registered driver's error)."""
    for error, service in _DRIVERS:
        if isinstance(exc, error):
            return service
    if isinstance(exc, ConnectionError | TimeoutError):
        return "connection"
    return None


def one_line(exc: BaseException) -> str | None:
    """The line an error is reported as, or None when it is not ours to report (a bug)."""
    if isinstance(exc, RecurError):
        text = str(exc)
    else:
        service = driver_service(exc)
        if service is None:
            return None
        text = f"{service}: {type(exc).__name__}: {exc}"
    return masked(" ".join(text.split())) or type(exc).__name__


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


class ArgumentsMismatch(InvalidMessage, TypeError):
    """The call's args/kwargs do not fit the task's signature (a TypeError too, as Celery's
    own check raises); refused at ``apply_async`` whether the call is published or stored."""


class UnknownDestination(InvalidMessage):
    """The resequencer destination is not configured (RECUR_DESTINATIONS)."""


class UnknownStep(InvalidMessage):
    """The resequencer step is neither the destination's (RECUR_RESEQ_STEPS) nor a task
    registered as a step (``@reseq_step``); nothing was numbered or run."""


class ResequencerFull(RecurError):
    """A destination holds as many unsent messages as its capacity allows; retry later."""


class DestinationUnavailable(RecurError):
    """An outbound send failed in a way that may pass (5xx, timeout, connection error)."""


class PermanentFailure(RecurError):
    """The task cannot succeed by running again; it goes to the dead-letter queue."""


class ServiceUnavailable(RecurError):
    """A service recur depends on (broker, Redis, database) cannot be reached."""


class LockUnavailable(ServiceUnavailable):
    """Redis cannot be reached to take, refresh or release a user lock."""


class LockWaitExceeded(PermanentFailure):
    """The job waited for its user longer than RECUR_LOCK_WAIT_BUDGET; it is dead-lettered."""


class LockPassedOver(PermanentFailure):
    """A later job of the user started while this one was missing (RECUR_LOCK_GAP_TIMEOUT);
    it must not run out of order, so it is dead-lettered (a replay runs it as a new job)."""


class LockLineFull(RecurError):
    """The user already has RECUR_LOCK_MAX_PARKED jobs waiting for their turn; nothing was
    published: retry later."""


class InvalidControlHeader(PermanentFailure):
    """A control header (recur_dispatch, recur_lock_seq, recur_lock_since) is malformed,
    out of range, unsigned or forged; the message is dead-lettered, not run.

    ``header`` names the header and ``problem`` what is wrong with it.
    """

    def __init__(self, header: str, problem: str = "invalid") -> None:
        self.header, self.problem = header, problem
        super().__init__(f"control header {header}: {problem}; not run")

    def __reduce__(self) -> tuple[type[InvalidControlHeader], tuple[str, str]]:
        return (type(self), (self.header, self.problem))


class ResultTooLarge(PermanentFailure):
    """A resequencer step's result is larger than RECUR_RESEQ_MAX_ENTRY_BYTES; its message
    is set aside with the reason (skipped and dead-lettered), never sent cut or dropped."""


class InvalidSchedule(RecurError, ValueError):
    """The countdown, eta or job key of a scheduled call is invalid; nothing was written."""


class StoreError(RecurError):
    """The due-jobs store failed."""


class StoreUnavailable(StoreError, ServiceUnavailable):
    """The due-jobs database cannot be reached."""


class BrokerUnavailable(ServiceUnavailable):
    """The broker cannot be reached, or did not confirm what was published."""


class BrokerBlocked(BrokerUnavailable):
    """The broker blocks publishing (RabbitMQ's connection.blocked: a memory or disk
    resource alarm): what was sent is not confirmed yet; it may still be taken when the
    alarm clears (a scheduler's late copy is stale and dropped)."""


class PublishRefused(BrokerUnavailable):
    """The broker nacked or returned messages of a publish (a full queue under a max-length
    policy with overflow reject-publish, a queue missing, a resource alarm): nothing of the
    batch was marked dispatched; the connection is still good."""


class StoreUnusable(StoreError):
    """The due-jobs store answers but recur cannot run against it as it is (a schema at
    another revision, a search_path naming no usable schema, a read-only or write-less
    role): waiting will not help, so a worker or the scheduler refuses to start."""


class SchemaOutOfDate(StoreUnusable):
    """The due-jobs schema is missing or old: run `recur db upgrade`."""


class SeedInputError(RecurError):
    """The seed job's input cannot be read as a population (a wrong file, format or column)."""


class InvalidArgument(RecurError):
    """A command's argument is invalid (a duration, a time, a name); nothing was changed."""


class UnknownJob(InvalidArgument):
    """No due job has this key; nothing was changed."""


class JobInFlight(InvalidArgument):
    """The job is dispatched (a copy is queued or running); nothing was changed."""


class BucketsFileError(ConfigError):
    """The buckets file (RECUR_BUCKETS_FILE) is invalid; nothing was started."""


class TaskModuleError(ConfigError):
    """A task module named in RECUR_IMPORTS cannot be imported."""


class ServiceMisconfigured(ConfigError):
    """A service recur depends on is set up to lose what recur writes (docs/security.md)."""


class ServiceRefused(ConfigError):
    """A service refuses recur's credentials, virtual host or permissions: waiting cannot
    help (the URL or the service's users must change), so the process does not start."""


class InvalidRateLimit(ConfigError, ValueError):
    """A ``@rate_limit`` is written wrong (its rate, burst or key); nothing was decorated."""
