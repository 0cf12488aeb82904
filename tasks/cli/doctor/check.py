"""One line of ``recur doctor``'s report (ok, warn or FAIL) and the helpers every
group of checks (rabbit.py, services.py, passwords.py) builds its lines with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from config.checks import is_loopback as address_is_loopback
from config.errors import one_line
from config.redact import masked
from config.settings import Settings

OK, WARN, FAIL = "ok", "warn", "FAIL"


def is_loopback(host: str | None) -> bool:
    """Whether a URL's ``host`` is this machine only (None: a Unix socket, local too)."""
    return not host or address_is_loopback(host.strip("[]"))


def said(exc: BaseException) -> str:
    """An error as one line: ours or a driver's as ``recur`` reports it, else its type."""
    line = one_line(exc)
    return line if line is not None else f"{type(exc).__name__}: {' '.join(str(exc).split())}"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    level: str
    name: str
    text: str

    def line(self) -> str:
        return masked(f"{self.level:<4}  {self.name}: {self.text}")


def ok(name: str, text: str) -> Check:
    return Check(OK, name, text)


def warn(name: str, text: str) -> Check:
    return Check(WARN, name, text)


def fail(name: str, text: str) -> Check:
    return Check(FAIL, name, text)


CheckGroup = Callable[[Settings], list[Check]]
