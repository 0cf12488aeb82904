"""One typed settings object, read from ``RECUR_*`` environment variables.

Every field has a default that works on one machine with the local services and
a one-line reason. A ``RECUR_`` variable that names no field, or a value that
does not parse, is a :class:`ConfigError` naming the variable: a misspelt
setting must never be silently ignored.

The fields, defaults and reasons are :mod:`config.settings_fields`; how each
value parses, :mod:`config.settings_parsers`; its range, :mod:`config.settings_bounds`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from functools import cache
from typing import Any

from config.bucketfile import load_table
from config.buckets import BUILTIN, BucketTable
from config.checks import contradictions, is_secret
from config.errors import BucketsFileError, ConfigError
from config.redact import MASK, masked
from config.settings_bounds import bounds_text, check_values, is_numeric
from config.settings_fields import Settings
from config.settings_parsers import parse_value
from config.text import is_unicode, visible

__all__ = ["PREFIX", "Settings", "defaults", "load_settings", "problems", "settings", "shown"]

PREFIX = "RECUR_"
#: Longest reason printed for one bad variable: a value echoed by a parser is cut there.
MAX_PROBLEM = 300


#: Settings that are gone, and what replaces them.
REMOVED = {
    "reseq_processor": "removed: register the processing step as a task in your modules "
                       "(RECUR_IMPORTS) and name it per destination in RECUR_RESEQ_STEPS "
                       "or per call with submit(..., step=...) (docs/resequencer.md)",
}


def problems(environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Parse every ``RECUR_`` variable: (values that parsed, one line per bad variable).

    All of them at once, so ``recur settings`` can list every mistake in one go.
    The bucket table comes first (RECUR_BUCKETS_FILE): kinds and pull-forward
    are checked against it, and they default to its own.
    """
    env = os.environ if environ is None else environ
    bad: list[str] = []
    try:
        table = load_table(_usable_path(env.get(PREFIX + "BUCKETS_FILE", "")))
    except BucketsFileError as exc:
        bad.append(str(exc))
        table = BUILTIN
    values: dict[str, Any] = {"kinds": table.kinds, "pull_forward": ",".join(table.names)}
    bad_names = {"buckets_file"} if bad else set()
    for var, raw in sorted(env.items()):
        if var.startswith(PREFIX) and (line := _read(var, raw, table, values)):
            bad.append(line)
            bad_names.add(var[len(PREFIX):].lower())
    unknown = set(values.get("reseq_steps", {})) - set(values.get("destinations", {}))
    if unknown:
        bad.append(f"RECUR_RESEQ_STEPS names destination(s) not in RECUR_DESTINATIONS: "
                   f"{', '.join(sorted(unknown))}")
    unknown = set(values.get("destination_policies", {})) - set(values.get("destinations", {}))
    if unknown:
        bad.append(f"RECUR_DESTINATION_POLICIES names destination(s) not in "
                   f"RECUR_DESTINATIONS: {', '.join(sorted(unknown))}")
    bad += contradictions({**defaults(), **values}, table, bad_names)
    return values, [masked(line) for line in bad]


#: Every setting's dataclass field, by name.
_FIELDS = {f.name: f for f in fields(Settings)}


def _read(var: str, raw: str, table: BucketTable, values: dict[str, Any]) -> str | None:
    """Parse and check one variable into ``values``; the line saying why not, if not."""
    name = var[len(PREFIX):].lower()
    if name in REMOVED:
        return f"{var}: {REMOVED[name]}"
    if name not in _FIELDS:
        return f"{var}: unknown setting (see `recur settings` for the known ones)"
    if not is_unicode(raw):  # bytes that are not UTF-8 arrive as lone surrogates
        return f"{var}: not valid UTF-8 text"
    try:
        value = parse_value(name, _FIELDS[name].type, raw, table)
        check_values({name: value}, table)
    except ValueError as exc:
        problem = _plain(exc)
        if is_numeric(_FIELDS[name].type) and bounds_text(name) not in problem:
            problem += f"; {name} is {bounds_text(name)}"
        return f"{var}={shown(name, raw)!r:.100}: {problem:.{MAX_PROBLEM}}"
    values[name] = value
    return None


def _usable_path(path: str) -> str:
    """RECUR_BUCKETS_FILE as a path to open: one that is not UTF-8 (reported by _read) or
    holds a NUL (no file system takes it) is not opened, so it is one line, not two."""
    if not is_unicode(path):
        return ""
    if "\0" in path:
        raise BucketsFileError(f"RECUR_BUCKETS_FILE={visible(path)!r:.100}: holds a NUL "
                               "character: not a file path")
    return path


def defaults() -> dict[str, Any]:
    """Every setting's default value, by field name."""
    return {f.name: f.default_factory() if callable(f.default_factory) else f.default
            for f in fields(Settings)}


def shown(name: str, raw: str) -> str:
    """A setting's value as it may be printed or logged: a secret as ***, URLs masked."""
    if is_secret(name):
        return MASK if raw else raw
    return masked(raw, stop_at_space=False)


def _plain(exc: ValueError) -> str:
    """int()/float()'s message, said for a setting."""
    text = str(exc)
    if text.startswith(("invalid literal for int()", "could not convert string to float")):
        said = text.partition(":")[0]  # not the value after it: it may hold a password
        return f"{'not a number' if 'float' in text else 'not a whole number'} ({said})"
    if text.startswith("Exceeds the limit"):
        return "not a whole number of a sane size"
    return text


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``environ`` (default: the process environment)."""
    values, bad = problems(environ)
    if bad:
        raise ConfigError("; ".join(bad) if len(bad) == 1 else
                          f"{len(bad)} bad settings: " + "; ".join(bad))
    return Settings(**values)


@cache
def settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return load_settings()
