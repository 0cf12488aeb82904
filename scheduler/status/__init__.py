"""``recur status`` below the ``tasks`` package: reading the store, the broker and
Redis needs none of the Celery app, so config/entry.py runs this command without
importing ``tasks`` (the imports were most of the command's wall time).

report.py reads the services, table.py and fair.py shape the store's part,
output.py prints, command.py is the click command (tasks/cli/status.py puts the
same command on the full ``recur`` group)."""
