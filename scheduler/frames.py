"""AMQP 0-9-1 ``basic.publish`` frames, encoded for one fixed message shape.

py-amqp encodes every message with its general-purpose serialiser, which is
most of the scheduler's CPU per published row. Our task messages always have
the same properties (JSON, persistent, a small header table), so they are
encoded here with ``struct`` and a whole batch goes out in one write. The
table encoding matches py-amqp's (``S`` strings, ``I``/``L`` integers, ``A``
arrays, ``V`` null), so the worker decodes exactly what it would otherwise.
"""

from __future__ import annotations

from struct import Struct
from typing import Any

FRAME_END = b"\xce"
_FRAME = Struct(">BHI")
_METHOD = Struct(">HHH")  # class basic (60), method publish (40), reserved ticket
_HEADER = Struct(">HHQH")  # class, weight, body size, property flags
_U32 = Struct(">I")
_I32 = Struct(">i")
_I64 = Struct(">q")
#: content-type, content-encoding, headers, delivery-mode, correlation-id.
_FLAGS = (1 << 15) | (1 << 14) | (1 << 13) | (1 << 12) | (1 << 10)
_JSON = b"\x10application/json\x05utf-8"
PERSISTENT = b"\x02"


def shortstr(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"AMQP short string longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(raw),)) + raw


def _item(value: Any) -> bytes:
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        return b"S" + _U32.pack(len(raw)) + raw
    if isinstance(value, bool) or not isinstance(value, int | list | type(None)):
        raise TypeError(f"unsupported header value {value!r}")
    if isinstance(value, int):
        if -2147483647 <= value <= 2147483647:
            return b"I" + _I32.pack(value)
        return b"L" + _I64.pack(value)
    if value is None:
        return b"V"
    items = b"".join(_item(v) for v in value)
    return b"A" + _U32.pack(len(items)) + items


def table(values: dict[str, Any]) -> bytes:
    """An AMQP field table, with its length prefix."""
    body = b"".join(shortstr(k) + _item(v) for k, v in values.items())
    return _U32.pack(len(body)) + body


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME.pack(kind, channel, len(payload)) + payload + FRAME_END


def publish(channel: int, exchange: str, routing_key: str, body: bytes,
            headers: dict[str, Any], correlation_id: str, *, mandatory: bool) -> bytes:
    """The method, header and body frames of one persistent JSON message."""
    method = (_METHOD.pack(60, 40, 0) + shortstr(exchange) + shortstr(routing_key)
              + (b"\x01" if mandatory else b"\x00"))
    props = (_HEADER.pack(60, 0, len(body), _FLAGS) + _JSON + table(headers) + PERSISTENT
             + shortstr(correlation_id))
    return frame(1, channel, method) + frame(2, channel, props) + frame(3, channel, body)
