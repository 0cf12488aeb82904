"""Our hand-encoded publish frames decode, with py-amqp's own decoder, to the message."""

from __future__ import annotations

from struct import unpack_from

import pytest
from amqp.serialization import decode_properties_basic, loads

from scheduler import frames


def split(data: bytes) -> list[tuple[int, int, bytes]]:
    out, offset = [], 0
    while offset < len(data):
        kind, channel, size = unpack_from(">BHI", data, offset)
        payload = data[offset + 7:offset + 7 + size]
        assert data[offset + 7 + size:offset + 8 + size] == frames.FRAME_END
        out.append((kind, channel, payload))
        offset += 8 + size
    return out


def test_publish_frames_decode_to_the_message() -> None:
    headers = {"task": "tasks.process_message", "id": "abc", "retries": 2,
               "recur_dispatch": ["job-ü", 7, 1_795_253_734_375_383], "none": None}
    body = b'[[{"id":"j"}],{},{}]'
    data = frames.publish(3, "recur.tasks", "short", body, headers, "abc", mandatory=True)
    (m_kind, m_ch, method), (h_kind, h_ch, header), (b_kind, b_ch, got_body) = split(data)
    assert (m_kind, h_kind, b_kind) == (1, 2, 3) and {m_ch, h_ch, b_ch} == {3}
    assert unpack_from(">HH", method) == (60, 40)
    args, _ = loads("Bssbb", method, 4)
    assert args == [0, "recur.tasks", "short", True, False]
    class_id, _weight, size = unpack_from(">HHQ", header)
    assert (class_id, size) == (60, len(body))
    props, _ = decode_properties_basic(header, 12)
    assert props["application_headers"] == headers
    assert (props["content_type"], props["content_encoding"], props["delivery_mode"],
            props["correlation_id"]) == ("application/json", "utf-8", 2, "abc")
    assert got_body == body


def test_unsupported_values_are_refused() -> None:
    with pytest.raises(TypeError):
        frames.table({"x": 1.5})
    with pytest.raises(ValueError, match="255"):
        frames.shortstr("q" * 300)
