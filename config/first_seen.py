"""Which values a process has already reported: a line once per distinct value.

A bad row the scheduler meets on every pass, or a garbled time read on every claim,
is worth one WARNING, not one a pass. The memory is bounded: past ``most`` values it
starts again (a value may then be reported once more).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable


class FirstSeen:
    """``first(value)``: True the first time ``value`` is seen (thread-safe, bounded)."""

    def __init__(self, most: int = 1000) -> None:
        self.most = most
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, value: Hashable) -> bool:
        with self._lock:
            if value in self._seen:
                return False
            if len(self._seen) >= self.most:
                self._seen.clear()
            self._seen.add(value)
            return True
