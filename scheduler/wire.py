"""What travels between the scheduler and a worker: the dispatch header and THE row-argument format.

Both sides import this module and nothing of each other's. Two things live here:

- the ``recur_dispatch`` header (:class:`Dispatch`): the scheduler sets it on
  every copy it dispatches, the worker checks it against the row;
- THE row-argument format, the one compact JSON text of a due-jobs row's
  ``args`` (:func:`encode_call`/:func:`decode_call`). ``USER_SQL`` in the store
  parses it (an index expression: the user id is ``args[0]`` of the array form,
  ``args[0].user_id`` of the full one), and ``spark/copy_lines.py`` writes the
  array form through this module's pieces (:data:`MESSAGE_ARRAY`,
  :data:`SEPARATORS`).

The format is compact, because at tens of millions of rows every byte of
``args`` is most of a row: no spaces, no empty ``"kwargs"``, and a message
argument leaves out what the row already holds in its own columns (its ``id``
when it is the job key, its ``bucket`` when it is the row's bucket). The
commonest call of all, one message and nothing else, is stored as the JSON array
``[user_id, payload]`` (``[user_id, payload, kind]`` with a kind): the field
names and the wrapper were a third of such a row's ``args``. Reading puts
everything back, and also reads the full form ``{"args": [...], "kwargs": {...}}``
(as sent to the broker). With tracing on, a row also keeps the trace context of
the run that wrote it (:func:`with_trace`, in the full form).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii
from typing import Any

from config import signing
from config.errors import InvalidControlHeader, InvalidMessage
from config.settings import settings
from config.text import brief
from routing.messages import COMPACT_JSON
from routing.request_headers import DISPATCH_HEADER as DISPATCH_HEADER
from routing.request_headers import request_header as request_header

# DISPATCH_HEADER (named in routing/request_headers.py, read by the lock and tracing
# too) is the message header the scheduler sets, ``[job_key, token, lease, due]`` (the
# lease expiry and the row's due time in microseconds since the epoch, see
# store.Claimed); the worker compares the first three with the row, and counts
# the job's pull-forward floor from the due time. One header: every header
# costs publish time.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Dispatch:
    """Which row a running message is a copy of, and the token it was dispatched with."""

    job_key: str
    token: int
    lease_us: int | None = None
    #: The row's due time when it was dispatched (absent from older messages).
    due_us: int | None = None

    @property
    def ran_due(self) -> datetime | None:
        """The due time of this run (it ran early when this is still ahead)."""
        return None if self.due_us is None else EPOCH + timedelta(microseconds=self.due_us)

    def matches(self, live: tuple[int, datetime | None] | None) -> bool:
        """Whether this copy is the row's live dispatch (token and lease stamp: a copy
        without a lease stamp matches nothing, since the token alone can repeat)."""
        if live is None or live[0] != self.token or self.lease_us is None:
            return False
        return live[1] is None or micros(live[1]) == self.lease_us

    def header(self) -> list[Any]:
        """The header value of this dispatch (a copy handed back carries it again)."""
        return [self.job_key, self.token, self.lease_us, self.due_us]


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: an exact, JSON-safe stamp of a datetime."""
    return (moment - EPOCH) // timedelta(microseconds=1)


def dispatch_of(request: Any) -> Dispatch | None:
    """The dispatch a task request carries (the scheduler's header), or None.

    The header is input: a malformed one, one without its lease stamp, or (with
    RECUR_SIGNING_KEY) one not signed for this job is refused with
    InvalidControlHeader, and the worker dead-letters the message unrun."""
    value = request_header(request, DISPATCH_HEADER)
    if value is not None:
        signing.verify(settings().signing_key, getattr(request, "id", None),
                       getattr(request, "task", None), DISPATCH_HEADER, value,
                       request_header(request, signing.SIG_HEADER))
    return parse_dispatch(value)


def dispatch_in(headers: Mapping[str, Any]) -> Dispatch | None:
    """The dispatch a raw message's headers carry (a dead letter's, say), or None;
    a malformed, lease-less or badly signed header counts as none: such a copy is
    nobody's live dispatch."""
    try:
        signing.verify_headers(settings().signing_key, headers, DISPATCH_HEADER)
        return parse_dispatch(headers.get(DISPATCH_HEADER))
    except InvalidControlHeader:
        return None


def parse_dispatch(value: Any) -> Dispatch | None:
    """A ``recur_dispatch`` header value as a :class:`Dispatch` (None: no header);
    InvalidControlHeader unless it is ``[job key, token, lease, due]`` (due may be
    absent or null; the lease stamp may not)."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) not in (3, 4):
        raise InvalidControlHeader(DISPATCH_HEADER, f"must be [job key, token, lease, due], "
                                   f"got {brief(value, 80)}")
    key, token, lease, *rest = value
    if not isinstance(key, str) or not key:
        raise InvalidControlHeader(DISPATCH_HEADER, f"the job key must be a non-empty "
                                   f"string, got {brief(key, 80)}")
    if lease is None:
        raise InvalidControlHeader(DISPATCH_HEADER, "it carries no lease stamp, and a token "
                                   "alone can repeat: it would match any lease")
    due = rest[0] if rest else None
    return Dispatch(key, _stamp(token, "token"), _stamp(lease, "lease stamp"),
                    None if due is None else _stamp(due, "due time"))


def _stamp(value: Any, what: str) -> int:
    """A whole number of a dispatch header (InvalidControlHeader if not one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidControlHeader(DISPATCH_HEADER, f"the {what} must be a whole number, "
                                   f"got {brief(value, 40)}")
    return value


def dispatch_header(job_key: str, token: int, lease_until: datetime,
                    due_at: datetime | None = None) -> list[Any]:
    """The header value :func:`dispatch_of` reads back."""
    head: list[Any] = [job_key, token, micros(lease_until)]
    return head if due_at is None else [*head, micros(due_at)]


#: The format's JSON punctuation (``json.dumps`` separators): no spaces, COMPACT_JSON's.
SEPARATORS = (COMPACT_JSON.item_separator, COMPACT_JSON.key_separator)


def _strip(message: Any, job_key: str | None, bucket: str | None) -> Any:
    """The message without the fields the row's job_key and bucket columns repeat."""
    if not isinstance(message, dict):
        return message
    out = dict(message)
    if job_key is not None and out.get("id") == job_key:
        del out["id"]
    if bucket is not None and "kind" not in out and out.get("bucket") == bucket:
        del out["bucket"]
    return out


def _restore(message: Any, job_key: str | None, bucket: str | None) -> Any:
    """The message with the fields :func:`_strip` left out put back (first, as sent)."""
    if not isinstance(message, dict):
        return message
    head: dict[str, Any] = {}
    if job_key is not None and "id" not in message:
        head["id"] = job_key
    if bucket is not None and "bucket" not in message and "kind" not in message:
        head["bucket"] = bucket
    return {**head, **message} if head else message


#: The fields of a message in the array form, in their order there (USER_SQL reads
#: the user id as item 0).
MESSAGE_ARRAY = ("user_id", "payload", "kind")
#: MESSAGE_ARRAY as a set: the fields a message in the array form may hold.
_ARRAY_FIELDS = frozenset(MESSAGE_ARRAY)


def _as_array(message: Any) -> list[Any] | None:
    """The array form of a stripped message, or None when it does not fit one."""
    if (not isinstance(message, dict) or "user_id" not in message or "payload" not in message
            or not message.keys() <= _ARRAY_FIELDS):
        return None
    single = [message["user_id"], message["payload"]]
    return [*single, message["kind"]] if "kind" in message else single


def encode_call(args: Sequence[Any], kwargs: Mapping[str, Any], retries: int = 0, *,
                job_key: str | None = None, bucket: str | None = None,
                payload_text: str | None = None) -> str:
    """The row's ``args`` JSON text; refuses what JSON cannot carry.

    With ``job_key``/``bucket`` (the row's), a message first argument leaves
    out the fields those columns repeat; :func:`decode_call` given the same
    puts them back. ``payload_text``: that message's payload as
    :func:`routing.messages.validate_encoded` encoded it; the array form is
    written around it rather than encoding the payload a second time.
    """
    call = list(args)
    if call:
        call[0] = _strip(call[0], job_key, bucket)
    single = _as_array(call[0]) if len(call) == 1 and not kwargs and not retries else None
    if single is not None and payload_text is not None:
        text = _array_text(single, payload_text)
        if text is not None:
            return text
    body: Any = {"args": call} if single is None else single
    if kwargs:
        body["kwargs"] = dict(kwargs)
    if retries:
        body["retries"] = retries
    try:
        return COMPACT_JSON.encode(body)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage("args", f"not JSON-serialisable ({exc})") from exc
    except RecursionError:
        raise InvalidMessage("args", "nested too deeply to encode as JSON") from None


def _array_text(single: list[Any], payload_text: str) -> str | None:
    """``[user_id, payload(, kind)]`` as :data:`COMPACT_JSON` writes it, around the payload's
    text; None when a field beside it is no string (the encoder then says what it is)."""
    user_id, kind = single[0], single[2] if len(single) == 3 else ""
    if not isinstance(user_id, str) or not isinstance(kind, str):
        return None
    tail = f",{encode_basestring_ascii(kind)}" if len(single) == 3 else ""
    return f"[{encode_basestring_ascii(user_id)},{payload_text}{tail}]"


def decode_call(text: str, job_key: str | None = None, bucket: str | None = None
                ) -> tuple[list[Any], dict[str, Any], int]:
    """(args, kwargs, retries) from a row's ``args`` text (compact or full form).

    Text that is not one of those forms (a row another writer put in the store)
    raises :class:`InvalidMessage` for ``args``, whatever is wrong with it.
    """
    return decode_traced(text, job_key, bucket)[:3]


def decode_traced(text: str, job_key: str | None = None, bucket: str | None = None
                  ) -> tuple[list[Any], dict[str, Any], int, str | None]:
    """:func:`decode_call`, and the trace context the row carries (:func:`with_trace`)."""
    try:
        return _decode(text, job_key, bucket)
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError,
            RecursionError) as exc:
        raise InvalidMessage("args", f"the stored call cannot be decoded "
                             f"({type(exc).__name__}: {str(exc)[:120]})") from exc


def _decode(text: str, job_key: str | None, bucket: str | None
            ) -> tuple[list[Any], dict[str, Any], int, str | None]:
    body = json.loads(text)
    if isinstance(body, list):
        if not body:
            raise ValueError("an empty array is not a message")
        return [_restore(dict(zip(MESSAGE_ARRAY, body, strict=False)), job_key, bucket)], {}, \
            0, None
    if not isinstance(body, dict):
        raise TypeError(f"a JSON {type(body).__name__} is not a call")
    args, kwargs, retries = body.get("args", []), body.get("kwargs", {}), body.get("retries", 0)
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("args must be an array and kwargs an object")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a whole number >= 0, got {retries!r:.40}")
    args = list(args)
    if args:
        args[0] = _restore(args[0], job_key, bucket)
    trace = body.get(TRACE)
    return args, dict(kwargs), retries, trace if isinstance(trace, str) else None


#: The full form's key holding the W3C ``traceparent`` of the run (or call) that
#: wrote the row (routing/tracing/): the next run's span links to it.
TRACE = "trace"


def with_trace(text: str, trace: str | None, max_bytes: int) -> str:
    """:func:`encode_call`'s ``text`` carrying ``trace`` (in the full form); ``text``
    itself without one, or when the trace would take it past ``max_bytes``: tracing
    never makes a call too large to store."""
    if trace is None:
        return text
    body = json.loads(text)
    if isinstance(body, list):
        body = {"args": [dict(zip(MESSAGE_ARRAY, body, strict=False))]}
    body[TRACE] = trace
    traced = json.dumps(body, separators=SEPARATORS)
    return traced if len(traced.encode()) <= max_bytes else text


def message_of(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The message argument of a message task call (as the router finds it)."""
    if args:
        return args[0]
    if "message" in kwargs:
        return kwargs["message"]
    raise InvalidMessage("message", "a message task needs a message as its first argument")
