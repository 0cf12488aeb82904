"""Load a library with some of its optional imports failing as if not installed.

Libraries import optional extras in a ``try`` and go on without them. When such an
extra is installed for something else (OpenTelemetry's SDK for recur's tracing) yet
serves the library only for a feature recur never turns on, :func:`absent` keeps it
out while the library loads: a ``None`` in ``sys.modules`` makes the import fail;
afterwards the name is free again, so code that does use the extra imports it as usual.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@contextmanager
def absent(names: Iterable[str]) -> Iterator[None]:
    """Inside: importing any of ``names`` not yet imported raises ImportError."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
