"""``recur``: the operational commands, one module per command or family.

The group is in group.py; each command module registers on it when imported,
and this package imports them all, so ``from tasks.cli import cli`` (what
config/entry.py runs) has every command. ``python -m tasks.cli`` is ``recur``.
"""

from tasks.cli import (  # noqa: F401 - each registers its commands on the group
    admin,
    daemons,
    dead,
    demo,
    flower,
    jobs,
    resequencer,
    seed,
    status,
    worker,
)
from tasks.cli.doctor import command as _doctor  # noqa: F401 - recur doctor
from tasks.cli.group import cli

__all__ = ["cli"]
