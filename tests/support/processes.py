"""Start and stop recur processes as children, for tests and benchmarks (bench/ imports
them from here too).

The helpers themselves are the demo's (tasks/cli/demo/children.py): ``recur demo``
is a product command, and the product never imports tests/.
"""

from tasks.cli.demo.children import Child, recur_argv, spawn, wait_for, wait_for_worker

__all__ = ["Child", "recur_argv", "spawn", "wait_for", "wait_for_worker"]
