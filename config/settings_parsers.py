"""Each setting's text as its field's type: numbers, switches, lists and mappings.

A value that does not parse is a ValueError saying what was expected; the
caller (:func:`config.settings.problems`) names the variable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from keyword import iskeyword
from types import MappingProxyType
from typing import Any

from config.bucketfile import NAME
from config.buckets import BucketTable
from config.destination_policy import parse_policies, parse_statuses
from config.destinations import parse_destinations


def _parse_kinds(raw: str, table: BucketTable) -> Mapping[str, str]:
    kinds = dict(table.kinds)
    given: set[str] = set()
    for item in filter(None, (part.strip() for part in raw.split(","))):
        kind, sep, bucket = item.partition(":")
        if not sep or not NAME.fullmatch(kind.strip()) or not bucket.strip():
            raise ValueError(f"{item!r:.80} is not 'kind:bucket' (a kind is letters, digits, "
                             "'_', '-' or '.')")
        if bucket.strip() not in table.names:
            raise ValueError(f"kind {kind.strip()!r} maps to unknown bucket {bucket.strip()!r}"
                             f" (buckets: {', '.join(table.names)})")
        if kind.strip() in given:  # the later one would silently replace the earlier
            raise ValueError(f"kind {kind.strip()!r} is given twice")
        given.add(kind.strip())
        kinds[kind.strip()] = bucket.strip()
    return MappingProxyType(kinds)


def _parse_steps(raw: str) -> Mapping[str, str]:
    steps = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        destination, sep, task = (text.strip() for text in item.partition(":"))
        if not sep or not destination or not task:
            raise ValueError(f"{item!r:.80} is not 'destination:task.name'")
        if destination in steps:  # the later one would silently replace the earlier
            raise ValueError(f"destination {destination!r:.80} is given two steps")
        steps[destination] = task
    return MappingProxyType(steps)


def _is_module_name(name: str) -> bool:
    """Whether ``import name`` could name it: dotted identifiers, none a keyword."""
    return all(part.isidentifier() and not iskeyword(part) for part in name.split("."))


def _parse_imports(raw: str) -> tuple[str, ...]:
    names = tuple(filter(None, (part.strip() for part in raw.split(","))))
    for name in names:
        if not _is_module_name(name):
            raise ValueError(f"{name!r} is not a module name like 'myapp.tasks'")
    return names


def _parse_setup(raw: str) -> str:
    """RECUR_OTEL_SETUP's syntax only (nothing imported: commands that never trace check
    it too); empty, or 'package.module:function'."""
    module, sep, function = raw.strip().partition(":")
    if raw.strip() and not (sep and _is_module_name(module) and _is_module_name(function)
                            and "." not in function):
        raise ValueError(f"{raw.strip()!r:.80} is not 'package.module:function'")
    return raw.strip()


def _parse_bool(raw: str) -> bool:
    """A switch: 1/true/yes or 0/false/no (any case); anything else is a mistake, not off."""
    word = raw.strip().lower()
    if word in ("1", "true", "yes"):
        return True
    if word in ("0", "false", "no"):
        return False
    raise ValueError("must be 1, 0, true, false, yes or no")


#: The text settings with a syntax of their own, by name (kinds: see parse_value).
_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {
    "imports": _parse_imports, "otel_setup": _parse_setup,
    "destinations": parse_destinations, "reseq_steps": _parse_steps,
    "destination_outage_statuses": parse_statuses, "destination_policies": parse_policies,
}


def parse_value(name: str, kind: Any, raw: str, table: BucketTable) -> Any:
    """A setting's raw text as its field's type (ValueError saying why it is not one)."""
    if name == "kinds":
        return _parse_kinds(raw, table)
    if name in _TEXT_PARSERS:
        return _TEXT_PARSERS[name](raw)
    if kind in (bool, "bool"):
        return _parse_bool(raw)
    if kind in (int, "int", float, "float") and not raw.isascii():
        # int() and float() take any script's digits ("١٢", "２"): a pasted lookalike
        raise ValueError("not a number (only ASCII digits are taken)")
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    # Celery's -l takes a log level in any case, the scheduler's logging only upper case
    return raw.strip().upper() if name == "log_level" else raw
