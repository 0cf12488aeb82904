"""``recur demo``: the main job end to end on the local services (``make demo``).

run.py runs it, env.py makes and removes its own vhost, key prefix and store,
children.py starts and stops its processes. Nothing here changes the
environment on import: the demo's variables go to its child processes only.
"""

from __future__ import annotations

import sys

import click

from tasks.cli.group import cli


@cli.command()
@click.option("--messages", default=300, show_default=True, help="Messages to seed.")
@click.option("--cycles", default=3, show_default=True, help="Runs of each message.")
@click.option("--every", default=1.0, show_default=True, help="Seconds between runs.")
@click.option("--work-scale", default=0.2, show_default=True,
              help="Multiplier of the simulated work (RECUR_WORK_SCALE for the workers).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait.")
def demo(messages: int, cycles: int, every: float, work_scale: float, timeout: float) -> None:
    """Run the main job end to end: seed, schedule, process, reschedule; print what happened."""
    from tasks.cli.demo.run import run_demo

    sys.exit(run_demo(messages, cycles, every, work_scale, timeout))
