"""``python -m tasks.cli …``: the same as the ``recur`` console script."""

from config.entry import main

main()
