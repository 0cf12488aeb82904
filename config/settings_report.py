"""``recur settings``: every setting (default, reason, range, the value in effect), then
every bad variable. It reads the environment itself, without the Celery app, so it
still works (and lists each mistake) when the settings do not load."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import fields

from config.errors import EXIT_ERROR
from config.settings import PREFIX, problems, shown
from config.settings_bounds import bounds_text, is_numeric
from config.settings_fields import Settings


def settings_report() -> int:
    """``recur settings`` without the Celery app: every setting (default, why, bounds, and
    the value in effect when one is set, secrets masked), then every bad variable."""
    for var, default, doc in describe():
        print(f"{var}={default}\n    {doc}")
        if var in os.environ:
            print(f"    set: {shown(var[len(PREFIX):].lower(), os.environ[var])}")
    _, bad = problems()
    for line in bad:
        print(f"recur: {line}", file=sys.stderr)
    return EXIT_ERROR if bad else 0


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, reason) for every setting: the documentation table. A numeric
    setting's reason ends with its range; a secret default is shown masked."""
    rows = []
    for f in fields(Settings):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if isinstance(default, Mapping):
            text = ",".join(f"{k}:{v}" for k, v in default.items())
        else:
            text = ",".join(default) if isinstance(default, tuple) else str(default)
        doc = f.metadata["doc"]
        if is_numeric(f.type):
            doc = f"{doc} Bounds: {bounds_text(f.name)}."
        rows.append((PREFIX + f.name.upper(), shown(f.name, text), doc))
    return rows
