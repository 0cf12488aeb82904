"""Durations as an operator types them: the one parser behind every command-line
duration (``recur jobs reschedule --in``, ``recur seed --spread`` and ``--every``).

``90`` is seconds; ``90s``, ``10m``, ``1.5h``, ``2d``, ``1w`` and sums such as
``1h30m`` carry their units. The range is the caller's (a delay must be positive,
a spread may be 0), and so is the error a caller raises for a bad one.
"""

from __future__ import annotations

import re

#: Seconds of each unit.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TERM = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z])")


def duration_seconds(text: str, units: str = "smhdw") -> float:
    """Seconds of ``text``: a number (seconds) or terms like ``1h30m`` whose units are
    among ``units``. ValueError if it is neither; any number, even a negative one or
    inf, is returned for the caller to judge."""
    raw = text.strip().lower()
    try:
        return float(raw)
    except ValueError:
        pass
    if not re.fullmatch(rf"(?:\d+(?:\.\d+)?\s*[{re.escape(units)}]\s*)+", raw):
        raise ValueError(f"{text!r} is not a duration like 90s, 10m or 1h30m")
    return sum(float(number) * UNITS[unit] for number, unit in _TERM.findall(raw))
