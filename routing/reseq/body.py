"""The JSON a destination receives: one encoder for the send and for the step's check.

Strict (no NaN or Infinity, which no JSON parser on the other side takes) and UTF-8 (a
lone surrogate cannot be sent): a step's result is checked with the encoder its send uses,
so a result the check lets through is one the sender can send.
"""

from __future__ import annotations

import json
from typing import Any

#: What encoding a value that is not strict JSON raises (UnicodeEncodeError is a ValueError).
UNSENDABLE = (TypeError, ValueError, RecursionError)


def strict_json(value: Any) -> bytes:
    """``value`` as sent: compact strict JSON, UTF-8; one of UNSENDABLE if it cannot be."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")
